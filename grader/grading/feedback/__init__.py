"""The learner's feedback pages: ``pages`` (what is written and kept, within a budget), ``hidden_tests`` (never
revealed), ``sanitise`` (learner HTML made safe), ``output_budget``, and the render caches (``template_cache``,
``highlight_cache``, ``soup_cache``, ``memo``)."""
