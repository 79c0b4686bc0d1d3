"""The config file's service settings and parsing limits: what a user writing ykshm.yaml meets."""

from __future__ import annotations

import msgspec
import pytest

from common.configsection import GoBool, Uint32, parse_section
from engine.config import (ConfigError, ConfigLimitError, load_config, load_web_config,
                           parse_config)


def _bomb(levels: int) -> str:
    rows = ["    - {name: d0, queues: &L0 [{name: leaf}]}"]
    rows += [f"    - {{name: d{i}, queues: &L{i} [{{name: a, queues: *L{i - 1}}}, {{name: b, queues: *L{i - 1}}}]}}"
             for i in range(1, levels + 1)]
    return "partitions:\n- name: default\n  queues:\n  - name: root\n    queues:\n" + "\n".join(rows) + "\n"


def test_the_engine_reads_its_file_through_the_same_limits(tmp_path):
    path = tmp_path / "ykshm.yaml"
    path.write_text(_bomb(20))  # 2**21 queues
    with pytest.raises(ConfigLimitError) as err:
        load_config(path)
    assert err.value.limit == "max_nodes" and str(path) in str(err.value)
    path.write_text(_bomb(3))  # a few aliases in a small tree are fine
    # root, d0..d3, and under them 1, 4, 10 and 22 queues (L_k = 2 * (1 + L_k-1))
    assert sum(1 for _ in load_config(path).partitions[0].root.walk()) == 1 + 4 + 1 + 4 + 10 + 22


def test_cors_origins_are_configured_and_checked(tmp_path):
    path = tmp_path / "ykshm.yaml"
    assert load_web_config(None).cors_origins == ("*",)
    path.write_text("service:\n  cors:\n    allowedOrigins: [\"https://ui.example.com:8443\"]\n")
    assert load_web_config(path).cors_origins == ("https://ui.example.com:8443",)
    path.write_text("service:\n  cors:\n    allowedOrigins: [\"ui.example.com/x\"]\n")
    with pytest.raises(ConfigError) as err:
        load_web_config(path)
    assert str(err.value) == ("config: service.cors.allowedOrigins[0]: invalid value 'ui.example.com/x': "
                              "must be * or an origin such as https://ui.example.com:8443")
    with pytest.raises(ConfigError, match=r"service\.cors\.origins: .*unknown key"):
        parse_config({"service": {"cors": {"origins": ["*"]}}})


def test_max_retained_applications_parses_as_go_uint32():
    assert parse_config({}).max_retained_apps == 10_000
    assert parse_config({"service": {"maxRetainedApplications": "25"}}).max_retained_apps == 25
    with pytest.raises(ConfigError, match=r"service\.maxRetainedApplications: invalid value '-1'"):
        parse_config({"service": {"maxRetainedApplications": "-1"}})


class Section(msgspec.Struct, frozen=True, rename="camel"):
    enabled: GoBool = False
    max_items: Uint32 = 5
    label: str = ""


def test_a_section_is_declared_once_with_go_rules_and_msgspec_types():
    assert parse_section(Section, "x", {"enabled": "T", "maxItems": "7"}) == Section(True, 7, "")
    assert parse_section(Section, "x", None) == Section()
    for raw, line in [({"maxItems": "4294967296"}, "config: x.maxItems: invalid value '4294967296': "
                       "out of range for an unsigned 32-bit integer"),
                      ({"label": 3}, "config: x.label: invalid value 3: expected `str`, got `int`"),
                      ({"max_items": 1}, "config: x.max_items: invalid value 1: unknown key")]:
        with pytest.raises(ConfigError) as err:
            parse_section(Section, "x", raw)
        assert str(err.value) == line
