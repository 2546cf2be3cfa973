#!/usr/bin/env python3
"""Offline validation of rendered Sluice manifests (run by deploy/check.sh).

Every document must pass:
- the Kubernetes OpenAPI schema of each minor version from --min-version to
  the newest that the pinned kubernetes-validate ships, in strict mode
  (unknown fields are errors). A kind without a schema is an error too,
  except the Chaos Mesh kinds, which are checked against the small schema
  below (the fields these manifests use, as documented by Chaos Mesh 2.x);
- the pod policy of these manifests: the restricted Pod Security Standard
  essentials (non-root, no privilege escalation, all capabilities dropped,
  RuntimeDefault seccomp), a read-only root filesystem, and CPU and memory
  requests and limits on every container.

Exit status 0 when every document passes, 1 otherwise. Needs only the
packages that kubernetes-validate pulls in; no network.
"""

import argparse
import functools
import sys

import jsonschema
import yaml
from packaging.version import Version

import kubernetes_validate.utils as kv

# The schemas are large: load each file once, not once per document.
kv.schema_contents = functools.lru_cache(maxsize=None)(kv.schema_contents)

_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "namespaces": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "labelSelectors": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotationSelectors": {"type": "object", "additionalProperties": {"type": "string"}},
        "fieldSelectors": {"type": "object", "additionalProperties": {"type": "string"}},
        "nodeSelectors": {"type": "object", "additionalProperties": {"type": "string"}},
        "podPhaseSelectors": {"type": "array", "items": {"type": "string"}},
        "nodes": {"type": "array", "items": {"type": "string"}},
        "pods": {
            "type": "object",
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
        },
    },
    "required": ["namespaces"],
}

_DURATION = {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"}

POD_CHAOS_SPEC = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "action": {"enum": ["pod-kill", "pod-failure", "container-kill"]},
        "mode": {"enum": ["one", "all", "fixed", "fixed-percent", "random-max-percent"]},
        "value": {"type": "string", "pattern": "^[0-9]+$"},
        "selector": _SELECTOR,
        "gracePeriod": {"type": "integer", "minimum": 0},
        "duration": _DURATION,
        "containerNames": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    },
    "required": ["action", "mode", "selector"],
    "allOf": [
        {
            "if": {"properties": {"action": {"const": "container-kill"}}},
            "then": {"required": ["containerNames"]},
        },
        {
            "if": {"properties": {"action": {"const": "pod-failure"}}},
            "then": {"required": ["duration"]},
        },
        {
            "if": {"properties": {"mode": {"enum": ["fixed", "fixed-percent", "random-max-percent"]}}},
            "then": {"required": ["value"]},
        },
    ],
}

_METADATA = {
    "type": "object",
    "properties": {"name": {"type": "string", "minLength": 1}},
    "required": ["name"],
}

CHAOS_MESH_SCHEMAS = {
    "PodChaos": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "chaos-mesh.org/v1alpha1"},
            "kind": {"const": "PodChaos"},
            "metadata": _METADATA,
            "spec": POD_CHAOS_SPEC,
        },
        "required": ["apiVersion", "kind", "metadata", "spec"],
    },
    "Schedule": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": "chaos-mesh.org/v1alpha1"},
            "kind": {"const": "Schedule"},
            # The experiments it creates get 6 more characters (Chaos Mesh docs).
            "metadata": {
                "type": "object",
                "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 57}},
                "required": ["name"],
            },
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "schedule": {"type": "string", "minLength": 1},
                    "concurrencyPolicy": {"enum": ["Forbid", "Allow"]},
                    "historyLimit": {"type": "integer", "minimum": 1},
                    "startingDeadlineSeconds": {"type": "integer", "minimum": 0},
                    "type": {"const": "PodChaos"},
                    "podChaos": POD_CHAOS_SPEC,
                },
                "required": ["schedule", "type", "podChaos", "historyLimit", "concurrencyPolicy"],
            },
        },
        "required": ["apiVersion", "kind", "metadata", "spec"],
    },
}

POD_TEMPLATE_PATHS = {
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "Pod": ("spec",),
}


def dig(obj, path):
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def pod_policy_errors(doc):
    """The pod policy of these manifests; a list of error strings."""
    path = POD_TEMPLATE_PATHS.get(doc.get("kind"))
    if path is None:
        return []
    spec = dig(doc, path) or {}
    errors = []
    pod_sc = spec.get("securityContext") or {}
    if pod_sc.get("runAsNonRoot") is not True:
        errors.append("pod securityContext.runAsNonRoot is not true")
    if dig(pod_sc, ("seccompProfile", "type")) != "RuntimeDefault":
        errors.append("pod securityContext.seccompProfile.type is not RuntimeDefault")
    if spec.get("hostNetwork") or spec.get("hostPID") or spec.get("hostIPC"):
        errors.append("pod uses host namespaces")
    for volume in spec.get("volumes") or []:
        if "hostPath" in volume:
            errors.append(f"volume {volume.get('name')} is a hostPath")
    containers = (spec.get("initContainers") or []) + (spec.get("containers") or [])
    for c in containers:
        name = c.get("name")
        sc = c.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            errors.append(f"container {name}: allowPrivilegeEscalation is not false")
        if sc.get("readOnlyRootFilesystem") is not True:
            errors.append(f"container {name}: readOnlyRootFilesystem is not true")
        if dig(sc, ("capabilities", "drop")) != ["ALL"]:
            errors.append(f"container {name}: capabilities.drop is not [ALL]")
        if dig(sc, ("capabilities", "add")):
            errors.append(f"container {name}: adds capabilities")
        if sc.get("privileged"):
            errors.append(f"container {name}: privileged")
        for kind in ("requests", "limits"):
            for res in ("cpu", "memory"):
                if dig(c, ("resources", kind, res)) is None:
                    errors.append(f"container {name}: no resources.{kind}.{res}")
    return errors


def schema_versions(min_version):
    versions = sorted({v for v in kv.all_versions() if Version(v) >= Version(min_version)}, key=Version)
    if not versions:
        raise SystemExit(
            f"kubernetes-validate {kv.__version__} ships no schema for Kubernetes {min_version} or later"
        )
    return versions


def name_of(doc):
    meta = doc.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{doc.get('kind')}/{(ns + '/') if ns else ''}{meta.get('name')}"


def validate_doc(doc, versions):
    """A list of error strings for one document."""
    errors = []
    api_version = doc.get("apiVersion", "")
    kind = doc.get("kind", "")
    if api_version.startswith("chaos-mesh.org/"):
        schema = CHAOS_MESH_SCHEMAS.get(kind)
        if schema is None:
            return [f"no schema for Chaos Mesh kind {kind} (add one to deploy/validate.py)"]
        validator = jsonschema.Draft202012Validator(schema)
        for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.path)):
            where = ".".join(str(p) for p in e.path) or "(document)"
            errors.append(f"{where}: {e.message}")
        return errors
    # The same error from several versions is reported once, with them all.
    by_message = {}
    for version in versions:
        try:
            kv.validate(doc, version, strict=True)
            continue
        except kv.ValidationError as e:
            where = ".".join(str(p) for p in e.path) or "(document)"
            message = f"{where}: {e.message}"
        except kv.SchemaNotFoundError:
            message = f"no Kubernetes schema for kind {kind} in {api_version} (a typo, or an API removed before this version?)"
        except kv.VersionNotSupportedError as e:
            message = e.message
        by_message.setdefault(message, []).append(kv.major_minor(version))
    for message, failed_versions in by_message.items():
        errors.append(f"Kubernetes {', '.join(failed_versions)}: {message}")
    return errors + pod_policy_errors(doc)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--min-version", default="1.30.0", help="oldest Kubernetes version to validate against")
    parser.add_argument("files", nargs="+", help="rendered multi-document YAML files")
    args = parser.parse_args()

    versions = schema_versions(args.min_version)
    print(
        f"kubernetes-validate {kv.__version__}: strict schemas of Kubernetes "
        f"{', '.join(kv.major_minor(v) for v in versions)}"
    )
    failed = 0
    total = 0
    for path in args.files:
        with open(path, encoding="utf-8") as f:
            try:
                docs = [d for d in yaml.safe_load_all(f) if d]
            except yaml.YAMLError as e:
                print(f"FAIL {path}: not YAML: {e}")
                failed += 1
                continue
        if not docs:
            print(f"FAIL {path}: no documents")
            failed += 1
            continue
        file_failed = 0
        for doc in docs:
            total += 1
            if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc:
                print(f"FAIL {path}: a document without apiVersion and kind")
                file_failed += 1
                continue
            errors = validate_doc(doc, versions)
            if errors:
                file_failed += 1
                print(f"FAIL {path}: {name_of(doc)}")
                for e in errors:
                    print(f"       {e}")
        failed += file_failed
        if not file_failed:
            print(f"ok   {path}: {len(docs)} documents")
    if failed:
        print(f"{failed} of {total} documents failed validation")
        return 1
    print(f"all {total} documents valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
