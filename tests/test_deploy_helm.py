"""The Helm chart deploy/helm/bayes-sched, checked without helm: Chart.yaml's fields, every value a
template names exists (and every value is used), every template is valid Kubernetes YAML once
rendered, the objects fit together, and the images, arguments and ports are the ones the
Containerfiles build and the real command line accepts.

The chart's templates keep to a small subset of Helm's template language, which :func:`render`
implements: ``{{ PATH }}``, ``{{ PATH | quote }}``, ``{{ toYaml PATH | nindent N }}``,
``{{ if PATH }}`` ... ``{{ end }}``, with ``{{-``/``-}}`` trimming, where PATH is
``.Values.x.y``, ``.Release.Name``, ``.Release.Namespace`` or ``.Chart.<field>``. Anything else
fails the test: a template that needs more is a template helm lint (CI) must check.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bayes_sched.cli import build_parser
from collectors import DEFAULT_PROMETHEUS_PORT

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
CHART = DEPLOY / "helm" / "bayes-sched"
RELEASE = {"Name": "demo", "Namespace": "gpu-team"}
_ACTION = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.S)
_PATH = r"\.[A-Za-z][\w.]*"


def project_version() -> str:
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


def chart() -> dict[str, Any]:
    return yaml.safe_load((CHART / "Chart.yaml").read_text())


def default_values() -> dict[str, Any]:
    return yaml.safe_load((CHART / "values.yaml").read_text())


class Renderer:
    """The subset of Helm templates the chart uses (see the module), recording each path read."""

    def __init__(self, values: dict[str, Any]) -> None:
        meta = chart()
        self.context = {"Values": values, "Release": RELEASE,
                        "Chart": {"Name": meta["name"], "Version": meta["version"],
                                  "AppVersion": meta["appVersion"]}}
        self.read: set[tuple[str, ...]] = set()

    def lookup(self, path: str, where: str) -> Any:
        value: Any = self.context
        keys = tuple(path.lstrip(".").split("."))
        for depth, key in enumerate(keys):
            if not isinstance(value, dict) or key not in value:
                raise AssertionError(f"{where}: {path} names no value ({'.'.join(keys[:depth + 1])}"
                                     " is missing)")
            value = value[key]
        if keys[0] == "Values":
            self.read.add(keys[1:])
        return value

    def action(self, text: str, where: str) -> tuple[str, Any]:
        """('if', value), ('end', None) or ('text', rendered) for one ``{{ ... }}``."""
        if text == "end":
            return "end", None
        if match := re.fullmatch(rf"if\s+({_PATH})", text):
            return "if", self.lookup(match[1], where)
        if match := re.fullmatch(rf"toYaml\s+({_PATH})\s*\|\s*nindent\s+(\d+)", text):
            dumped = yaml.safe_dump(self.lookup(match[1], where), default_flow_style=False,
                                    sort_keys=False).rstrip("\n")
            pad = " " * int(match[2])
            return "text", "\n" + "\n".join(pad + line for line in dumped.splitlines())
        if match := re.fullmatch(rf"({_PATH})(\s*\|\s*quote)?", text):
            value = self.lookup(match[1], where)
            shown = str(value).lower() if isinstance(value, bool) else str(value)
            return "text", json.dumps(shown) if match[2] else shown
        raise AssertionError(f"{where}: '{{{{ {text} }}}}' is beyond the template subset this "
                             "test renders (see tests/test_deploy_helm.py)")

    def render(self, path: Path) -> str:
        source = path.read_text()
        out: list[str] = []
        shown: list[bool] = []
        position, trim_next = 0, False
        for match in _ACTION.finditer(source):
            text = source[position:match.start()]
            if trim_next:
                text = text.lstrip()
            if match[1]:
                text = text.rstrip()
            if all(shown):
                out.append(text)
            line = source.count("\n", 0, match.start()) + 1
            kind, value = self.action(match[2], f"{path.name}:{line}")
            if kind == "if":
                shown.append(bool(value))
            elif kind == "end":
                assert shown, f"{path.name}:{line}: end without if"
                shown.pop()
            elif all(shown):
                out.append(value)
            position, trim_next = match.end(), bool(match[3])
        assert not shown, f"{path.name}: if without end"
        tail = source[position:]
        out.append(tail.lstrip() if trim_next else tail)
        return "".join(out)


def templates() -> list[Path]:
    found = sorted((CHART / "templates").glob("*.yaml"))
    assert found
    return found


def render_all(values: dict[str, Any]) -> tuple[list[dict[str, Any]], Renderer]:
    renderer = Renderer(values)
    documents: list[dict[str, Any]] = []
    for template in templates():
        text = renderer.render(template)
        try:
            loaded = [doc for doc in yaml.safe_load_all(text) if doc is not None]
        except yaml.YAMLError as error:
            raise AssertionError(f"{template.name} renders to invalid YAML: {error}\n{text}"
                                 ) from None
        for doc in loaded:
            assert {"apiVersion", "kind", "metadata"} <= set(doc), (template.name, doc)
            assert doc["metadata"]["name"].startswith(RELEASE["Name"]), template.name
            assert doc["metadata"]["namespace"] == RELEASE["Namespace"], template.name
        documents += loaded
    return documents, renderer


def by_kind(documents: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    kinds: dict[str, dict[str, Any]] = {}
    for doc in documents:
        assert doc["kind"] not in kinds, f"two {doc['kind']} objects"
        kinds[doc["kind"]] = doc
    return kinds


def leaves(values: dict[str, Any], prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for key, value in values.items():
        if isinstance(value, dict) and value:
            yield from leaves(value, (*prefix, key))
        else:
            yield (*prefix, key)


def test_chart_yaml_has_helms_required_fields_and_the_projects_version() -> None:
    meta = chart()
    assert meta["apiVersion"] == "v2" and meta["name"] == CHART.name
    assert meta["type"] == "application" and meta["description"]
    assert re.fullmatch(r"\d+\.\d+\.\d+(?:-[\w.]+)?", meta["version"])
    assert meta["appVersion"] == project_version()


def test_every_template_renders_to_valid_yaml_and_every_value_is_named_and_used() -> None:
    values = default_values()
    documents, renderer = render_all(values)
    assert {doc["kind"] for doc in documents} == {
        "DaemonSet", "Service", "ServiceMonitor", "Deployment", "PersistentVolumeClaim"}
    # Each switch off: still valid YAML, and what it guards is gone.
    values["collector"]["serviceMonitor"]["enabled"] = False
    values["scheduler"]["enabled"] = False
    fewer, again = render_all(values)
    assert {doc["kind"] for doc in fewer} == {"DaemonSet", "Service"}
    read = renderer.read | again.read
    unused = [".".join(leaf) for leaf in leaves(default_values())
              if not any(leaf[:len(path)] == path for path in read)]
    assert unused == [], "values no template reads"


def test_a_template_beyond_the_subset_or_naming_a_missing_value_fails(tmp_path: Path) -> None:
    renderer = Renderer(default_values())
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: {{ .Values.collector.no_such_key }}\n")
    with pytest.raises(AssertionError, match="collector.no_such_key is missing"):
        renderer.render(bad)
    bad.write_text('a: {{ include "x" . }}\n')
    with pytest.raises(AssertionError, match="beyond the template subset"):
        renderer.render(bad)


def image_of(containerfile: str) -> str:
    """The ``name:tag`` a Containerfile's build command (in its comments) tags."""
    (tag,) = set(re.findall(r"docker build -f deploy/\S+ -t (\S+) \.",
                            (DEPLOY / containerfile).read_text()))
    return tag


def entrypoint_and_command(containerfile: str) -> list[str]:
    instructions = {}
    for line in (DEPLOY / containerfile).read_text().splitlines():
        keyword, _, rest = line.strip().partition(" ")
        if keyword in ("ENTRYPOINT", "CMD", "RUN"):
            instructions[keyword] = rest
    assert "pip install" in instructions["RUN"]
    return [*json.loads(instructions["ENTRYPOINT"]), *json.loads(instructions["CMD"])]


def test_the_objects_fit_together_and_run_what_the_images_and_command_line_accept() -> None:
    values = default_values()
    kinds = by_kind(render_all(values)[0])
    version = project_version()
    # The collector: DaemonSet -> headless Service -> ServiceMonitor, on the collector's port.
    daemonset, service, monitor = kinds["DaemonSet"], kinds["Service"], kinds["ServiceMonitor"]
    pod = daemonset["spec"]["template"]
    assert daemonset["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [RELEASE["Namespace"]]
    (container,) = pod["spec"]["containers"]
    (port,) = container["ports"]
    (service_port,) = service["spec"]["ports"]
    assert port["containerPort"] == service_port["port"] == DEFAULT_PROMETHEUS_PORT
    assert service_port["targetPort"] == port["name"] == monitor["spec"]["endpoints"][0]["port"]
    args = [str(a).replace("$(NODE_NAME)", "gpu-node-1") for a in container["args"]]
    collect = build_parser(["collect"]).parse_args(["collect", *args])
    assert collect.prometheus == port["containerPort"] and collect.bind == "0.0.0.0"
    assert {e["name"] for e in container["env"]} >= {"NODE_NAME"}
    assert container["image"] == image_of("Containerfile") == f"bayes-sched-collector:{version}"
    assert entrypoint_and_command("Containerfile")[:2] == ["bayes-sched", "collect"]
    assert pod["spec"]["hostPID"] is True
    # The scheduler: one replica on Ray, its state on the claim, the image's entry point.
    deployment, claim = kinds["Deployment"], kinds["PersistentVolumeClaim"]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    spod = deployment["spec"]["template"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= spod["metadata"]["labels"].items()
    (scheduler,) = spod["spec"]["containers"]
    assert scheduler["image"] == image_of("Containerfile.scheduler") == \
        f"bayes-sched-scheduler:{version}"
    entry = entrypoint_and_command("Containerfile.scheduler")
    assert entry[:2] == ["bayes-sched", "serve"]
    for argv in (entry[2:], [str(a) for a in scheduler["args"]]):
        serve = build_parser(["serve"]).parse_args(["serve", *argv])
        assert serve.backend == "ray", argv
    serve = build_parser(["serve"]).parse_args(["serve", *map(str, scheduler["args"])])
    assert serve.ray_address == values["scheduler"]["rayAddress"]
    (mount,) = scheduler["volumeMounts"]
    assert serve.state.is_relative_to(mount["mountPath"])
    (volume,) = spod["spec"]["volumes"]
    assert volume["name"] == mount["name"]
    assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    # The chart and the plain manifest deploy the same collector.
    with open(DEPLOY / "kubernetes" / "daemonset.yaml") as handle:
        plain = {doc["kind"]: doc for doc in yaml.safe_load_all(handle)}["DaemonSet"]
    (plain_container,) = plain["spec"]["template"]["spec"]["containers"]
    assert plain_container["image"] == container["image"]
    assert shlex.join(map(str, plain_container["args"])) == shlex.join(map(str, container["args"]))
