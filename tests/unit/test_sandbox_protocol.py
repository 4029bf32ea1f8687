"""The grader <-> sandbox wire format, and the read-once stream that crosses it by call-backs."""
import numpy as np
import pytest

from grader.checks import welford
from grader.compare import CheckFailed
from grader.grading.sandbox import protocol
from tests.implementations import define_in_sandbox

# slow: a real grading sandbox (~8 s to start)
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("value", [None, True, 3, -2**70, 1.5, float("inf"), "text", (1, "a"), [1.0, [2]],
                                   {"k": (1, 2)}, np.arange(6, dtype=np.int32).reshape(2, 3), np.float32(2.5)])
def test_plain_values_round_trip(value):
    back = protocol.decode(protocol.encode(value))
    assert type(back) is type(value)
    if isinstance(value, np.ndarray):
        assert back.dtype == value.dtype and np.array_equal(back, value)
    else:
        assert back == value


def test_foreign_objects_arrive_as_unsupported():
    class Sneaky(np.ndarray):
        def __eq__(self, other):
            return True

    back = protocol.decode(protocol.encode(np.zeros(3).view(Sneaky)))
    assert isinstance(back, protocol.Unsupported) and "subclass" in back.type_name
    assert isinstance(protocol.decode(protocol.encode(object())), protocol.Unsupported)


@pytest.mark.parametrize("data", [
    {"t": "stream", "id": 1, "len": 5, "dtype": "<f8"},            # only the grader hands out streams
    {"t": "callable", "id": 1, "name": "f"},                        # ... and call-backs
    {"t": "ndarray", "dtype": "|O", "shape": [1], "b64": ""},       # object arrays never cross
    {"t": "int", "v": "9" * 5000},
    {"t": "nonsense"},
])
def test_the_grader_side_refuses_what_a_sandbox_may_not_send(data):
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(data)


def test_only_trusted_streams_are_encoded_as_streams():
    stream = welford.CountingStream(np.arange(4.0))
    registered = []
    data = protocol.encode(stream, register_callable=lambda f: registered.append(f) or len(registered))
    assert data["t"] == "stream" and data["len"] == 4 and registered == [stream.stream_request]
    assert protocol.encode(stream)["t"] == "unsupported"  # the sandbox side encodes without call-backs


@pytest.fixture(scope="module")
def sandbox():
    client = pytest.importorskip("grader.grading.sandbox.client")
    with client.Sandbox(mode="auto") as box:
        yield box


def rereads_behind_the_proxys_back(x):
    """A second pass that goes around the proxy's iterator, straight to the grader."""
    n, total = 0, 0.0
    for xi in x:
        n, total = n + 1, total + xi
    mean = total / n
    token = x._request("iter")
    m2 = sum((xi - mean) ** 2 for xi in x._request("next", token, 10**9))
    return float(mean), float(m2 / n)


def forges_a_fresh_proxy(x):
    """Builds a new proxy on the same call-back, hoping for a new count."""
    fresh = type(x)(x._request, len(x), x.dtype)
    n, total = 0, 0.0
    for xi in x:
        n, total = n + 1, total + xi
    mean = total / n
    return float(mean), float(sum((xi - mean) ** 2 for xi in fresh) / n)


@pytest.mark.parametrize("trick", [rereads_behind_the_proxys_back, forges_a_fresh_proxy])
def test_the_read_count_stays_with_the_grader(sandbox, trick):
    proxy = define_in_sandbox(sandbox, trick, "welford_mean_var")
    with pytest.raises(CheckFailed, match="went over the data a second time"):
        welford.check_welford_one_pass(proxy, n=3000)
