"""YuniKorn's admission rules as tables (../shared/research/yunikorn-deploy.md §1.5, §1.7): who may
bring their own user.info, which namespaces are processed and labelled, the configuration keys and
their leniency, the generated application IDs. Each row is a decision a user would see as an
allowed, patched or denied pod."""

from __future__ import annotations

import logging

import orjson
import pytest

from shim_k8s.admission import mutate
from shim_k8s.admission.conf import AdmissionConf
from shim_k8s.admission.request import decode
from shim_k8s.admission.usergroup import annotation_error, user_info_value

from admission_harness import pod, review

USER_INFO = "yunikorn.apache.org/user.info"
CONTROLLER = "system:serviceaccount:kube-system:job-controller"


class Cluster:
    def __init__(self, namespaces=None, classes=None):
        self.namespaces, self.classes = namespaces or {}, classes or {}

    def namespace_annotations(self, namespace):
        return self.namespaces.get(namespace)

    def preemption_allowed(self, name):
        return (self.classes.get(name) or {}).get("yunikorn.apache.org/allow-preemption") != "false"


def run(conf_data, obj, cluster=None, **kw):
    conf = AdmissionConf.parse(conf_data, "yunikorn")
    req = decode(orjson.dumps(review(obj, **kw)))
    assert req is not None
    return mutate.mutate(conf, cluster or Cluster(), req)


FORGED = pod(annotations={USER_INFO: '{"user":"bob"}'})


@pytest.mark.parametrize("conf, user, groups, allowed", [
    # defaults: trustControllers=true, systemUsers=^system:serviceaccount:kube-system:
    ({}, "alice", ("dev",), False),
    ({}, CONTROLLER, (), True),
    ({}, "system:serviceaccount:default:builder", (), False),          # not kube-system
    ({}, "xsystem:serviceaccount:kube-system:x", (), False),             # the ^ anchors it
    ({"admissionController.accessControl.trustControllers": "false"}, CONTROLLER, (), False),
    ({"admissionController.accessControl.externalUsers": "^ci-bot$"}, "ci-bot", (), True),
    ({"admissionController.accessControl.externalUsers": "^ci-bot$"}, "ci-bot2", (), False),
    ({"admissionController.accessControl.externalUsers": "bot"}, "my-bot-2", (), True),  # unanchored
    ({"admissionController.accessControl.externalGroups": "^platform$, ^ops$"}, "carol", ("dev", "ops"), True),
    ({"admissionController.accessControl.externalGroups": "^platform$"}, "carol", ("dev",), False),
    ({"admissionController.accessControl.systemUsers": "^robot:"}, "robot:x", (), True),
    ({"admissionController.accessControl.bypassAuth": "true"}, "alice", ("dev",), True),
])
def test_who_may_set_user_info(conf, user, groups, allowed):
    response = run(conf, FORGED, user=user, groups=groups)
    assert response.allowed is allowed
    if not allowed:
        assert response.message == (f"user {user} with groups [{','.join(groups)}] is not allowed to "
                                     "set user annotation")


def test_bypass_auth_neither_checks_nor_writes_user_info():
    response = run({"admissionController.accessControl.bypassAuth": "true"}, pod())
    assert response.allowed and response.patch
    assert all(USER_INFO not in orjson.dumps(op).decode() for op in response.patch)


@pytest.mark.parametrize("conf, namespace, annotations, processed, labelled", [
    ({}, "default", None, True, True),
    ({}, "kube-system", None, False, False),
    ({"admissionController.filtering.processNamespaces": "^spark-"}, "spark-1", None, True, True),
    ({"admissionController.filtering.processNamespaces": "^spark-"}, "web", None, False, False),
    ({"admissionController.filtering.bypassNamespaces": "^kube-system$,^tools$"}, "tools", None, False, False),
    ({"admissionController.filtering.labelNamespaces": "^batch$"}, "web", None, True, False),
    ({"admissionController.filtering.noLabelNamespaces": "^web$"}, "web", None, True, False),
    ({}, "kube-system", {"yunikorn.apache.org/namespace.enableYuniKorn": "true"}, True, True),
    ({}, "default", {"yunikorn.apache.org/namespace.enableYuniKorn": "yes"}, False, False),
    ({"admissionController.filtering.noLabelNamespaces": "^web$"}, "web",
     {"yunikorn.apache.org/namespace.generateAppId": "true"}, True, True),
    ({}, "default", {"yunikorn.apache.org/namespace.generateAppId": "false"}, True, False),
])
def test_namespace_filtering(conf, namespace, annotations, processed, labelled):
    cluster = Cluster(namespaces={namespace: annotations} if annotations is not None else {})
    response = run(conf, pod(), cluster, namespace=namespace)
    paths = [op["path"] for op in response.patch or []]
    assert ("/spec/schedulerName" in paths) is processed
    assert ("/metadata/labels" in paths) is labelled
    assert response.allowed


def test_an_app_yunikorn_pod_is_left_alone_and_loses_its_user_info_patch():
    response = run({}, pod(labels={"app": "yunikorn"}))
    assert response.allowed and not response.patch


@pytest.mark.parametrize("namespace, unique, expected", [
    ("default", False, "yunikorn-default-autogen"),
    ("n" * 60, False, ("yunikorn-" + "n" * 60 + "-autogen")[:63]),
    ("team-a", True, "team-a-uniqueautogen"),
    ("x" * 40, True, "x" * 26 + "-uniqueautogen"),
])
def test_generated_application_ids(namespace, unique, expected):
    assert mutate.app_id(namespace, unique) == expected
    conf = {"admissionController.filtering.generateUniqueAppId": "true" if unique else "false"}
    response = run(conf, pod(), namespace=namespace)
    (labels,) = [op["value"] for op in response.patch if op["path"] == "/metadata/labels"]
    assert labels["yunikorn.apache.org/app-id"] == labels["applicationId"] == expected


def test_bad_config_values_fall_back_to_the_defaults_with_a_log(caplog):
    with caplog.at_level(logging.ERROR, logger="ykshm.admission"):
        conf = AdmissionConf.parse({"admissionController.accessControl.bypassAuth": "maybe",
                                    "admissionController.accessControl.externalUsers": "(unclosed"},
                                   "yunikorn")
    assert conf.bypass_auth is False and conf.external_users == ()
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "accessControl.bypassAuth: 'maybe' is not a boolean" in messages
    assert "accessControl.externalUsers: '(unclosed' is not a regular expression" in messages
    assert AdmissionConf.parse({"admissionController.accessControl.bypassAuth": "T"}, "y").bypass_auth


@pytest.mark.parametrize("text, error", [
    ('{"user":"bob","groups":["a"]}', None),
    ("null", None),
    ('{"user":"bob","extra":1}', None),
    ("", "unexpected end of JSON input"),
    ("bob", "invalid character 'b' looking for beginning of value"),
    ('"bob"', "json: cannot unmarshal string into Go value of type si.UserGroupInformation"),
    ('{"user":5}', "json: cannot unmarshal number into Go struct field UserGroupInformation.user of type string"),
    ('{"User":true}', "json: cannot unmarshal bool into Go struct field UserGroupInformation.user of type string"),
    ('{"groups":"admins"}', "json: cannot unmarshal string into Go struct field UserGroupInformation.groups of type []string"),
    ('{"groups":[1]}', "json: cannot unmarshal number into Go struct field UserGroupInformation.groups of type string"),
])
def test_user_info_must_decode_as_yunikorns_type(text, error):
    assert annotation_error(text) == error
    response = run({}, pod(annotations={USER_INFO: text}), user=CONTROLLER)
    assert response.allowed is (error is None)
    if error:
        assert response.message == error


def test_user_info_is_written_as_go_marshals_it():
    assert user_info_value("alice", ()) == '{"user":"alice"}'
    assert user_info_value("a<b>&c", ("g",)) == '{"user":"a\\u003cb\\u003e\\u0026c","groups":["g"]}'


def test_hot_refresh_off_freezes_the_configuration_after_start():
    from shim_k8s.admission.caches import ClusterCache

    cache = ClusterCache("yunikorn")
    cm = {"metadata": {"name": "yunikorn-configs"},
          "data": {"service.enableConfigHotRefresh": "false",
                   "admissionController.accessControl.externalUsers": "^ci$"}}
    cache.apply("configmaps", [("ADDED", cm)])
    cache.started = True
    assert [p.pattern for p in cache.conf.external_users] == ["^ci$"]
    cm["data"]["admissionController.accessControl.externalUsers"] = "^anyone"
    cache.apply("configmaps", [("MODIFIED", cm)])
    assert [p.pattern for p in cache.conf.external_users] == ["^ci$"]
    # someone else's ConfigMap in the namespace is not configuration
    cache.apply("configmaps", [("ADDED", {"metadata": {"name": "other"}, "data": {"x": "y"}})])
    assert "other" not in cache.configmaps


def test_the_validated_document_is_the_merged_policy_group():
    import base64
    import gzip

    from shim_k8s.admission.validate import queues_yaml

    def cm(name, data=None, binary=None):
        return {"metadata": {"name": name}, "data": data or {}, "binaryData": binary or {}}

    maps = {"yunikorn-defaults": cm("yunikorn-defaults", {"service.policyGroup": "team",
                                                          "team.yaml": "defaults"}),
            "yunikorn-configs": None}
    assert queues_yaml(maps, cm("yunikorn-configs", {"team.yaml": "mine"})) == "mine"
    assert queues_yaml(maps, cm("yunikorn-configs")) == "defaults"
    assert queues_yaml(maps, cm("yunikorn-defaults", {"queues.yaml": "q"})) == "q"
    assert queues_yaml({}, cm("yunikorn-configs", {"other": "x"})) == ""
    zipped = base64.b64encode(gzip.compress(b"zipped")).decode()   # binaryData, .gz unpacked
    assert queues_yaml({}, cm("yunikorn-configs", binary={"queues.yaml.gz": zipped})) == "zipped"


async def test_validation_fails_open_when_the_scheduler_cannot_be_asked(caplog):
    import httpx

    from shim_k8s.admission.validate import validate_conf

    conf = AdmissionConf.parse({"admissionController.webHook.schedulerServiceAddress": "127.0.0.1:1"},
                               "yunikorn")
    cm = {"metadata": {"name": "yunikorn-configs"}, "data": {"queues.yaml": "not: [yaml"}}
    req = decode(orjson.dumps(review(cm, kind="ConfigMap", namespace="yunikorn")))
    with caplog.at_level(logging.ERROR, logger="ykshm.admission"):
        async with httpx.AsyncClient() as client:
            response = await validate_conf(conf, {}, client, req)
    assert response.allowed is True
    assert any("unreachable" in r.getMessage() for r in caplog.records)


async def test_a_bad_value_is_denied_naming_it_and_an_unknown_key_passes_as_the_shim_takes_it():
    """newcomer-2: a value the shim refuses passed the webhook and was refused afterwards; the
    webhook now runs the shim's own parse, so both agree: a bad value is denied naming key and
    value, an unknown (misspelled) key passes as YuniKorn's shim ignores it (with a warning)."""
    import httpx

    from shim_k8s.admission.validate import validate_conf

    conf = AdmissionConf.parse({"admissionController.webHook.schedulerServiceAddress": "127.0.0.1:1"},
                               "yunikorn")
    cm = {"metadata": {"name": "yunikorn-configs"}, "data": {"event.maxStreams": "many"}}
    req = decode(orjson.dumps(review(cm, kind="ConfigMap", namespace="yunikorn")))
    async with httpx.AsyncClient() as client:
        response = await validate_conf(conf, {}, client, req)
    assert response.allowed is False
    assert "event.maxStreams" in response.message and "many" in response.message
    cm["data"] = {"event.maxStream": "1000"}
    req = decode(orjson.dumps(review(cm, kind="ConfigMap", namespace="yunikorn")))
    async with httpx.AsyncClient() as client:
        assert (await validate_conf(conf, {}, client, req)).allowed is True
