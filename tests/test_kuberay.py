"""deploy/kuberay/ holds manifests KubeRay accepts and that run swarm as their comments say.

1. Schema: every RayCluster and RayJob there validates against KubeRay's own CRD schema for its
   kind (tests/data/kuberay/, from KubeRay v1.7.0, see SOURCE.md), made strict about unknown
   fields as the API server is under kubectl's default ``--validate=strict``; the validator
   demonstrably rejects a wrong type, a missing required field and a misspelt field.
2. Entrypoints: each RayJob's command is ``swarm run`` / ``swarm sweep`` with real options only,
   and parses through the CLI (its launch stubbed out) to a run on the job's own cluster
   (``--address auto``, ``--executor ray``, one worker actor per worker CPU), an in-cluster
   engine Service, and output on the shared volume (``swarm run``: written by the workers).
3. The API key: from a Kubernetes Secret (secretKeyRef) on the head container, the driver,
   only; never a literal value, never in a runtimeEnvYAML, no Secret manifest in the folder.
4. The volume: the output path is on a ReadWriteMany claim (shared-storage.yaml) mounted at the
   same path in the head and in every worker; the RayJobs' clusters equal raycluster.yaml's.
5. The image: every pod runs the image that deploy/kuberay/Dockerfile builds, whose
   rayproject/ray tag is the manifests' ``rayVersion``.
6. The comments: every ``swarm`` command they show has real flags only, every file they
   ``kubectl apply -f`` exists, and each manifest is applied by one of them.

No network, no cluster: a few YAML files and the CLI's option parser.
"""

from __future__ import annotations

import copy
import gzip
import importlib
import re
import shlex
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml

from swarm.runtime.specs import RunSpec

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy" / "kuberay"
SCHEMAS = ROOT / "tests" / "data" / "kuberay"
#: the stored CRD of each kind (only its v1 schema kept; SOURCE.md)
CRD_FILES = {"RayCluster": "ray.io_rayclusters.v1.yaml.gz", "RayJob": "ray.io_rayjobs.v1.yaml.gz"}
#: KubeRay appends 6 characters to a RayJob's name for its cluster, whose name may have 53
MAX_RAYJOB_NAME = 47
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

Doc = dict[str, Any]


@cache
def manifests() -> list[tuple[str, int, Doc]]:
    """(file name, index in file, document) of every YAML document in deploy/kuberay/ (shared:
    a test that changes one works on a copy)."""
    out = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        for i, doc in enumerate(yaml.load_all(path.read_text(), Loader=_Loader)):
            if doc is not None:
                out.append((path.name, i, doc))
    return out


def of_kind(kind: str) -> list[tuple[str, Doc]]:
    return [(name, doc) for name, _, doc in manifests() if doc.get("kind") == kind]


def the(kind: str) -> Doc:
    (found,) = of_kind(kind)
    return found[1]


def rayjobs() -> list[tuple[str, Doc]]:
    return of_kind("RayJob")


def cluster_specs() -> list[tuple[str, Doc]]:
    """(where, RayCluster spec) of the RayCluster and of every RayJob's own cluster."""
    return [(name, doc["spec"]) for name, doc in of_kind("RayCluster")] + [
        (name, doc["spec"]["rayClusterSpec"]) for name, doc in rayjobs()
    ]


def pod_specs(doc: Doc) -> Iterator[tuple[str, Doc]]:
    """(role, pod spec) of every pod a manifest makes: head, worker groups, plain pods."""
    spec: Doc = doc.get("spec") or {}
    if doc.get("kind") == "Pod":
        yield "pod", spec
    if doc.get("kind") in CRD_FILES:
        cluster: Doc = spec["rayClusterSpec"] if doc["kind"] == "RayJob" else spec
        yield "head", cluster["headGroupSpec"]["template"]["spec"]
        for group in cluster.get("workerGroupSpecs", []):
            yield "worker", group["template"]["spec"]
        if "submitterPodTemplate" in spec:
            yield "submitter", spec["submitterPodTemplate"]["spec"]


def ray_container(pod: Doc) -> Doc:
    """The Ray container of a KubeRay pod: the first (KubeRay's RayContainerIndex)."""
    return pod["containers"][0]


# -- the schemas ------------------------------------------------------------------------------


@cache
def crd_schema(kind: str) -> Doc:
    """The stored v1 openAPIV3Schema of a KubeRay kind."""
    crd = yaml.load(gzip.decompress((SCHEMAS / CRD_FILES[kind]).read_bytes()), Loader=_Loader)
    assert crd["spec"]["group"] == "ray.io" and crd["spec"]["names"]["kind"] == kind
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1"
    schema: Doc = version["schema"]["openAPIV3Schema"]
    return schema


def strict(schema: Any) -> Any:
    """The schema with unknown fields refused wherever it lists an object's properties (as the
    API server does under strict field validation), unless it preserves unknown fields."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) for key, value in schema.items()}
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@cache
def validator(kind: str, strict_fields: bool = True) -> Any:
    if not strict_fields:
        return jsonschema.Draft7Validator(crd_schema(kind))
    schema = strict(crd_schema(kind))
    jsonschema.Draft7Validator.check_schema(schema)  # a schema jsonschema misreads would pass anything
    return jsonschema.Draft7Validator(schema)


def schema_errors(doc: Doc, strict_fields: bool = True) -> list[str]:
    found = validator(doc["kind"], strict_fields).iter_errors(doc)
    return sorted(f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in found)


KUBERAY_DOCS = [(name, i, doc) for name, i, doc in manifests() if doc.get("kind") in CRD_FILES]


def test_the_folder_has_a_raycluster_and_two_rayjobs() -> None:
    kinds = sorted(doc["kind"] for _, _, doc in KUBERAY_DOCS)
    assert kinds == ["RayCluster", "RayJob", "RayJob"]
    commands = sorted(shlex.split(doc["spec"]["entrypoint"])[1] for _, doc in rayjobs())
    assert commands == ["run", "sweep"]


@pytest.mark.parametrize("name,index,doc", KUBERAY_DOCS, ids=[f"{n}#{i}" for n, i, _ in KUBERAY_DOCS])
def test_manifest_validates_against_the_kuberay_crd(name: str, index: int, doc: Doc) -> None:
    assert doc["apiVersion"] == "ray.io/v1"
    assert schema_errors(doc) == []


def _raycluster() -> Doc:
    return copy.deepcopy(the("RayCluster"))


def _rayjob() -> Doc:
    return copy.deepcopy(rayjobs()[0][1])


def _set(doc: Doc, path: str, value: Any = None, drop: bool = False) -> Doc:
    """``doc`` with the value at ``path`` (keys and list indices, /-separated) set, or dropped."""
    *parents, last = [int(p) if p.isdigit() else p for p in path.split("/")]
    node: Any = doc
    for key in parents:
        node = node[key]
    if drop:
        del node[last]
    else:
        node[last] = value
    return doc


BROKEN = {
    # replicas is an integer: a quoted number is refused
    "replicas as a string": (
        lambda: _set(_raycluster(), "spec/workerGroupSpecs/0/replicas", "2"),
        "spec/workerGroupSpecs/0/replicas: '2' is not of type 'integer'",
    ),
    # rayStartParams is a map of strings: KubeRay's documented pitfall of an unquoted number
    "rayStartParams value not a string": (
        lambda: _set(_raycluster(), "spec/headGroupSpec/rayStartParams/num-cpus", 0),
        "spec/headGroupSpec/rayStartParams/num-cpus: 0 is not of type 'string'",
    ),
    "worker group without groupName": (
        lambda: _set(_raycluster(), "spec/workerGroupSpecs/0/groupName", drop=True),
        "spec/workerGroupSpecs/0: 'groupName' is a required property",
    ),
    "misspelt field": (
        lambda: _set(_raycluster(), "spec/headGroupSpec/rayStartParam", {"num-cpus": "0"}),
        "spec/headGroupSpec: Additional properties are not allowed ('rayStartParam' was unexpected)",
    ),
    "shutdownAfterJobFinishes as a string": (
        lambda: _set(_rayjob(), "spec/shutdownAfterJobFinishes", "true"),
        "spec/shutdownAfterJobFinishes: 'true' is not of type 'boolean'",
    ),
    "env value from an unknown source": (
        lambda: _set(
            _rayjob(),
            "spec/rayClusterSpec/headGroupSpec/template/spec/containers/0/env/0/valueFrom",
            {"secretRef": {"name": "swarm-engine-key"}},
        ),
        "spec/rayClusterSpec/headGroupSpec/template/spec/containers/0/env/0/valueFrom: "
        "Additional properties are not allowed ('secretRef' was unexpected)",
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_the_validator_rejects_a_broken_manifest(case: str) -> None:
    make, expected = BROKEN[case]
    assert expected in schema_errors(make())


def test_unknown_fields_are_refused_by_the_strict_rule_only() -> None:
    """KubeRay's schema sets no additionalProperties: false; the strict rule is what catches a
    misspelt field (the API server refuses it, kubectl's default being --validate=strict)."""
    doc = _set(_raycluster(), "spec/headGroupSpec/rayStartParam", {"num-cpus": "0"})
    assert schema_errors(doc, strict_fields=False) == []
    assert schema_errors(doc) != []


# -- the entrypoints --------------------------------------------------------------------------


@cache
def _command(name: str) -> Any:
    from typer.main import get_command

    from swarm.cli import app

    command = get_command(app).commands.get(name)  # type: ignore[attr-defined]
    assert command is not None, f"swarm {name} is not a command"
    return command


@cache
def _options(name: str) -> set[str]:
    return {"--help"} | {opt for p in _command(name).params for opt in (*p.opts, *p.secondary_opts)}


def _flags(args: list[str]) -> list[str]:
    return [arg.split("=", 1)[0] for arg in args if arg.startswith("--")]


@pytest.mark.parametrize("name,job", rayjobs(), ids=[n for n, _ in rayjobs()])
def test_entrypoint_flags_are_real_options(name: str, job: Doc) -> None:
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[0] == "swarm" and argv[1] in ("run", "sweep"), argv
    unknown = [flag for flag in _flags(argv[2:]) if flag not in _options(argv[1])]
    assert unknown == [], f"{name}: not options of swarm {argv[1]}: {unknown}"


class _Ran(Exception):
    """The entrypoint reached the library call (which the test does not make)."""


def parsed_entrypoint(job: Doc, monkeypatch: pytest.MonkeyPatch) -> tuple[RunSpec, dict[str, Any]]:
    """The RunSpec the entrypoint's flags make (sweep: of its points) and, for a sweep, what
    the command hands to the sweep; nothing is run."""
    argv = shlex.split(job["spec"]["entrypoint"])
    seen: dict[str, Any] = {}
    if argv[1] == "run":

        def fake_run(spec: RunSpec, **kw: Any) -> Any:
            seen["spec"] = spec
            raise _Ran

        monkeypatch.setattr(importlib.import_module("swarm.launch"), "execute_run", fake_run)
    else:

        def fake_sweep(sweep_spec: Any, launcher: Any, targets: list[Any], executor: Any, **kw: Any) -> Any:
            seen.update(sweep_spec=sweep_spec, spec=launcher.spec.model_copy(update={"targets": targets}), **kw)
            raise _Ran

        monkeypatch.setattr(importlib.import_module("swarm.sweep.runner"), "execute_sweep", fake_sweep)
    with pytest.raises(_Ran):
        _command(argv[1]).main(args=argv[2:], prog_name=f"swarm {argv[1]}", standalone_mode=False)
    if "--html" in argv:
        seen["html"] = argv[argv.index("--html") + 1]
    return seen["spec"], seen


def worker_cpus(cluster: Doc) -> int:
    """CPUs the worker groups give Ray: num-cpus, else the container's CPU limit (KubeRay's rule)."""
    total = 0
    for group in cluster["workerGroupSpecs"]:
        container = ray_container(group["template"]["spec"])
        cpus = group.get("rayStartParams", {}).get("num-cpus") or container["resources"]["limits"]["cpu"]
        total += int(group["replicas"]) * int(cpus)
    return total


def pvc_mounts(pod: Doc) -> dict[str, tuple[str, bool]]:
    """mountPath: (claimName, read-only) of every PVC mounted in the pod's Ray container."""
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in pod.get("volumes", [])
        if "persistentVolumeClaim" in v
    }
    return {
        m["mountPath"].rstrip("/"): (claims[m["name"]], bool(m.get("readOnly")))
        for m in ray_container(pod).get("volumeMounts", [])
        if m["name"] in claims
    }


def mount_of(pod: Doc, path: str) -> tuple[str, str]:
    """(mountPath, claimName) of the writable PVC mount in the pod's Ray container holding ``path``."""
    for root, (claim, read_only) in pvc_mounts(pod).items():
        if path == root or path.startswith(root + "/"):
            assert not read_only, f"{root} is mounted read-only"
            return root, claim
    raise AssertionError(f"{path} is on no PersistentVolumeClaim mounted in {ray_container(pod)['name']}")


@pytest.mark.parametrize("name,job", rayjobs(), ids=[n for n, _ in rayjobs()])
def test_entrypoint_runs_on_the_jobs_cluster_against_the_in_cluster_engine(
    name: str, job: Doc, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, seen = parsed_entrypoint(job, monkeypatch)
    cluster = job["spec"]["rayClusterSpec"]
    assert spec.executor == "ray" and spec.address == "auto"
    # head: no actors (num-cpus "0"); the workers fill the worker CPUs, one each
    assert cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    assert spec.workers == worker_cpus(cluster)
    assert spec.targets, "no --target: swarm would start its own emulator"
    for target in spec.targets:
        assert (urlsplit(target.url).hostname or "").endswith(".svc.cluster.local"), target.url
    output = spec.output_dir if "sweep_spec" not in seen else seen["sweep_spec"].output
    html = seen.get("html")
    pods = dict(pod_specs(job))
    head_mount = mount_of(pods["head"], output)
    if html is not None:
        assert mount_of(pods["head"], str(html)) == head_mount
    if "sweep_spec" not in seen:
        # swarm run: the workers write their parts to the same folder, on the same claim
        assert spec.worker_writes
        for group in cluster["workerGroupSpecs"]:
            assert mount_of(group["template"]["spec"], output) == head_mount


@pytest.mark.parametrize("name,job", rayjobs(), ids=[n for n, _ in rayjobs()])
def test_rayjob_removes_its_cluster_which_is_the_rayclusters(name: str, job: Doc) -> None:
    assert job["spec"]["shutdownAfterJobFinishes"] is True
    assert job["spec"]["rayClusterSpec"] == the("RayCluster")["spec"]
    assert len(job["metadata"]["name"]) <= MAX_RAYJOB_NAME


def test_the_volume_is_a_shared_claim_in_this_folder() -> None:
    claims = {doc["metadata"]["name"]: doc["spec"] for _, doc in of_kind("PersistentVolumeClaim")}
    used = set()
    for where, cluster in cluster_specs():
        head = pvc_mounts(cluster["headGroupSpec"]["template"]["spec"])
        assert head, f"{where}: the head mounts no claim"
        for group in cluster["workerGroupSpecs"]:
            assert pvc_mounts(group["template"]["spec"]) == head, f"{where}: {group['groupName']}"
        used |= {claim for claim, _ in head.values()}
    for claim in used:
        assert claim in claims, f"claim {claim} is not in deploy/kuberay/"
        assert claims[claim]["accessModes"] == ["ReadWriteMany"]


# -- the API key ------------------------------------------------------------------------------


def _env(container: Doc) -> dict[str, Doc]:
    return {e["name"]: e for e in container.get("env", [])}


def _api_key_envs() -> set[str]:
    names = set()
    for _, job in rayjobs():
        argv = shlex.split(job["spec"]["entrypoint"])
        names.add(argv[argv.index("--api-key-env") + 1])
    assert len(names) == 1, names
    return names


def test_the_api_key_comes_from_a_secret_on_the_head_only() -> None:
    (key_env,) = _api_key_envs()
    for where, cluster in cluster_specs():
        head = ray_container(cluster["headGroupSpec"]["template"]["spec"])
        entry = _env(head).get(key_env)
        assert entry is not None, f"{where}: the head has no {key_env}"
        assert "value" not in entry and set(entry["valueFrom"]) == {"secretKeyRef"}, where
        ref = entry["valueFrom"]["secretKeyRef"]
        assert ref["name"] and ref["key"]
        for group in cluster["workerGroupSpecs"]:
            for container in group["template"]["spec"]["containers"]:
                assert key_env not in _env(container), f"{where}: a worker gets {key_env}"
                assert "envFrom" not in container
                assert not any("secretKeyRef" in e.get("valueFrom", {}) for e in container.get("env", []))
        # the Secret is made from a file with kubectl, as the file's header says
        text = (DEPLOY / where).read_text()
        assert f"kubectl create secret generic {ref['name']} --from-file={ref['key']}=" in text, where


def test_the_api_key_is_never_a_literal_or_in_a_runtime_env() -> None:
    (key_env,) = _api_key_envs()
    for name, _, doc in manifests():
        for role, pod in pod_specs(doc):
            for container in [*pod.get("containers", []), *pod.get("initContainers", [])]:
                entry = _env(container).get(key_env)
                assert entry is None or "value" not in entry, f"{name} {role}: {key_env} has a literal value"
        runtime_env = (doc.get("spec") or {}).get("runtimeEnvYAML")
        assert runtime_env is None or key_env not in runtime_env, f"{name}: {key_env} in runtimeEnvYAML"
    # a Secret manifest with a placeholder would overwrite the real key on `kubectl apply -f` of the folder
    assert of_kind("Secret") == []


# -- the image --------------------------------------------------------------------------------


def dockerfile() -> tuple[str, str, str]:
    """(image name it is built as, Ray version and Python tag of its rayproject/ray base)."""
    text = (DEPLOY / "Dockerfile").read_text()
    (built,) = re.findall(r"docker build -f deploy/kuberay/Dockerfile -t (\S+) \.$", text, flags=re.M)
    (base,) = re.findall(r"^FROM (\S+)", text, flags=re.M)
    match = re.fullmatch(r"rayproject/ray:(\d+\.\d+\.\d+)-(py3\d+)", base)
    assert match, f"not an official rayproject/ray release image: {base}"
    assert "pip install" in text and "COPY" in text  # installs this checkout
    return built, match.group(1), match.group(2)


def test_every_pod_runs_the_image_the_dockerfile_builds() -> None:
    built, ray_version, _ = dockerfile()
    pods = 0
    for name, _, doc in manifests():
        for role, pod in pod_specs(doc):
            for container in pod["containers"]:
                assert container["image"] == built, f"{name} {role}: {container['image']} is not {built}"
                pods += 1
    assert pods >= 7  # the RayCluster's and two RayJobs' head and workers, the data reader
    for where, cluster in cluster_specs():
        assert cluster["rayVersion"] == ray_version, f"{where}: rayVersion is not the image's Ray"


def test_the_dockerfile_python_satisfies_the_package() -> None:
    _, _, python = dockerfile()
    (minimum,) = re.findall(r'^requires-python = ">=3\.(\d+)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert int(python.removeprefix("py3")) >= int(minimum)


# -- the comments -----------------------------------------------------------------------------


def comment_commands() -> list[tuple[str, str]]:
    """(file, command line) of each comment line in deploy/kuberay/, continuation lines joined."""
    out = []
    for path in sorted(DEPLOY.iterdir()):
        joined = ""
        for line in path.read_text().splitlines():
            text = line.split("#", 1)[1].strip() if line.lstrip().startswith("#") else ""
            if joined:
                text = joined + " " + text
            if text.endswith("\\"):
                joined = text[:-1].strip()
                continue
            joined = ""
            if text:
                out.append((path.name, text))
    return out


def test_swarm_commands_in_the_comments_use_real_flags() -> None:
    from typer.main import get_command

    from swarm.cli import app

    commands = get_command(app).commands  # type: ignore[attr-defined]
    checked = 0
    for name, line in comment_commands():
        for match in re.finditer(r"(?<![\w./-])swarm ([a-z]+) ([^`]*)", line):
            if match.group(1) not in commands:
                continue  # prose: "swarm reaches it ..."
            known = _options(match.group(1))
            for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", match.group(2)):
                assert flag in known, f"{name}: {line!r}: {flag} is not an option of swarm {match.group(1)}"
                checked += 1
    assert checked >= 8


def test_files_the_comments_apply_exist() -> None:
    named = set()
    for name, line in comment_commands():
        for path in re.findall(r"kubectl (?:apply|delete) -f (\S+)", line):
            assert (ROOT / path).is_file(), f"{name}: {line!r}: no {path}"
            named.add(Path(path).name)
    assert {p.name for p in DEPLOY.glob("*.yaml")} <= named, "a manifest no comment says how to apply"
