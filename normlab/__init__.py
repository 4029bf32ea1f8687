"""Demos for the LayerNorm and RMSNorm course: widgets, figures and experiments the notebooks import."""
