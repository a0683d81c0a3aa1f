"""Fuzzing the configuration loader: any input is a valid configuration or a clean ValueError."""

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daskflow.config import DEFAULTS, load

leaves = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                   st.text(max_size=8), st.sampled_from(["PP", "NN", "DD", "ND", "DN", "channel", "z", "auto",
                                                          "ptdma", "float32", "flow_rate", "zero"]))
values = st.recursive(leaves, lambda children: st.one_of(st.lists(children, max_size=4),
                                                         st.dictionaries(st.text(max_size=6), children, max_size=4)),
                      max_leaves=12)


def _mutations():
    """A known key path with a random value, or a random key somewhere."""
    paths = [(section, key) for section, body in DEFAULTS.items() for key in body]
    return st.tuples(st.sampled_from(paths), values, st.booleans(), st.text(max_size=6))


@settings(max_examples=2000, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(_mutations(), max_size=4), st.one_of(st.none(), values))
def test_loader_never_raises_anything_but_value_error(mutations, junk):
    cfg: dict = {}
    for (section, key), value, add_junk_key, junk_key in mutations:
        cfg.setdefault(section, {})
        if isinstance(cfg[section], dict):
            cfg[section][key] = value
            if add_junk_key:
                cfg[section][junk_key] = value
    if junk is not None and mutations and mutations[0][2]:
        cfg = junk if not isinstance(junk, dict) else {**cfg, **junk}
    try:
        out = load(copy.deepcopy(cfg))
    except ValueError as exc:
        assert str(exc).startswith(("config", "boundaries"))
        return
    assert set(out) == set(DEFAULTS)


@pytest.mark.parametrize("bad", [[], "grid", 3, None])
def test_non_mapping_config_is_a_clean_error(bad):
    with pytest.raises(ValueError, match="config"):
        load(bad)
