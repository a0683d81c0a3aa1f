"""Fuzzing the configuration loader: any input, a dict or YAML text, is a valid configuration or a
clean ValueError."""

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daskflow import config_input
from daskflow.config import DEFAULTS, load, validate

leaves = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                   st.text(max_size=8), st.sampled_from(["PP", "NN", "DD", "ND", "DN", "channel", "z", "auto",
                                                          "ptdma", "float32", "flow_rate", "zero"]))
values = st.recursive(leaves, lambda children: st.one_of(st.lists(children, max_size=4),
                                                         st.dictionaries(st.text(max_size=6), children, max_size=4)),
                      max_leaves=12)
REQUIRED = {"grid": {"shape": [8, 8, 8]}, "physics": {"nu": 0.1, "forcing": {"kind": "none"}}}


def _mutations():
    """A known key path with a random value, or a random key somewhere."""
    paths = [(section, key) for section, body in DEFAULTS.items() for key in body]
    return st.tuples(st.sampled_from(paths), values, st.booleans(), st.text(max_size=6))


@settings(max_examples=2000, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(_mutations(), max_size=4), st.one_of(st.none(), values), st.booleans())
def test_loader_never_raises_anything_but_value_error(mutations, junk, complete):
    cfg: dict = copy.deepcopy(REQUIRED) if complete else {}  # the required keys given: deeper checks run
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
    assert set(out.to_dict()) == set(DEFAULTS)


@pytest.mark.parametrize("bad", [[], "grid", 3, None])
def test_non_mapping_config_is_a_clean_error(bad):
    with pytest.raises(ValueError, match="config"):
        load(bad)


YAML_PIECES = list("[]{}:,-&*!<|>'\"#?\n\t abxyz019.e+_~") + [
    "&a ", "*a", "<<: ", "!!float ", "!!python/name:os.system ", "grid: ", "shape: ", "physics: ", "nu: ", ".inf",
    ".nan", "1e-3"]
YAML_TEXT = st.lists(st.sampled_from(YAML_PIECES), max_size=60).map("".join)


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(YAML_TEXT, st.booleans())
def test_yaml_reader_never_raises_anything_but_value_error(text, complete):
    if complete:
        text = "grid: {shape: [8, 8, 8]}\nphysics: {nu: 0.1, forcing: {kind: none}}\n" + text
    try:
        out = validate(config_input.parse(text))  # what load does with a file's text
    except ValueError as exc:
        assert str(exc).startswith("config") and "\n" not in str(exc)
        return
    assert set(out) == set(DEFAULTS)

