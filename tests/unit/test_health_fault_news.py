"""Between cycles, a fault read starts the next cycle only when it shows something new."""

from __future__ import annotations

from gridloop.health.fault_news import events, news


def _xid(uuid: str, code: str) -> dict:
    labels = {"__name__": "DCGM_FI_DEV_XID_ERRORS", "UUID": uuid, "gridloop_family": "xid"}
    return {"metric": labels, "value": [1.0, code]}


def _ecc(uuid: str, increase: str) -> dict:
    return {"metric": {"UUID": uuid}, "value": [1.0, increase]}


def _fresh(at: str) -> dict:
    return {"metric": {}, "value": [1.0, at]}


def _read(xid=(), ecc=(), fresh="100") -> dict:
    return {"events": list(xid), "ecc_dbe": list(ecc), "fresh": [_fresh(fresh)]}


def test_a_quiet_fleet_read_again_is_no_news_though_the_freshness_moved():
    seen = events(_read(fresh="100"))
    assert not news(seen, _read(fresh="115"))


def test_a_new_xid_on_another_gpu_is_news():
    seen = events(_read(xid=[_xid("GPU-a", "79")]))
    assert news(seen, _read(xid=[_xid("GPU-a", "79"), _xid("GPU-b", "79")]))


def test_a_new_code_on_a_gpu_already_failing_is_news():
    seen = events(_read(xid=[_xid("GPU-a", "13")]))
    assert news(seen, _read(xid=[_xid("GPU-a", "79")]))


def test_an_ecc_increase_that_drifts_as_its_window_slides_is_not_news_again():
    seen = events(_read(ecc=[_ecc("GPU-a", "1")]))
    assert not news(seen, _read(ecc=[_ecc("GPU-a", "0.75")]))
    assert news(seen, _read(ecc=[_ecc("GPU-a", "1"), _ecc("GPU-b", "1")]))


def test_a_fault_that_cleared_is_no_news_the_cycle_releases_it_on_its_own_time():
    seen = events(_read(xid=[_xid("GPU-a", "79")]))
    assert not news(seen, _read())


def test_an_exporter_down_is_news():
    down = {"metric": {"instance": "n1", "gridloop_family": "down"}, "value": [1.0, "0"]}
    assert news(events(_read()), {"events": [down], "fresh": [_fresh("100")]})


def test_odd_samples_do_not_raise():
    assert events({"events": [{}], "ecc_dbe": [{"metric": None}]})
