#!/usr/bin/python3
"""Schema check of Kubernetes manifests against the API's types as the official Python client (Debian's
python3-kubernetes) carries them, generated from the API's OpenAPI schema: every field of every object
must be one its type has, of its type (objects, lists, maps, strings, numbers, booleans), and every
required field there (the client's own validation on deserializing). Prints one line per object; exit 1
on any fault, 0 with a SKIP line where the client is not installed.
  tools/check_k8s_manifests.py FILE.yaml..."""
import sys

try:
    import yaml
    import kubernetes.client as k8s
except ImportError as e:
    print("SKIP k8s manifests: %s (apt install python3-kubernetes python3-yaml)" % e)
    sys.exit(0)

GROUPS = {"v1": "V1", "apps/v1": "V1", "rbac.authorization.k8s.io/v1": "V1", "node.k8s.io/v1": "V1"}
PRIMITIVES = {"str": (str, int, float), "int": (int,), "float": (int, float), "bool": (bool,), "object": (object,),
              "datetime": (str,), "date": (str,)}


def check(value, typename, where, faults):
    if value is None:
        return
    if typename in PRIMITIVES:
        if not isinstance(value, PRIMITIVES[typename]) or (typename == "int" and isinstance(value, bool)):
            faults.append("%s: %r is not %s" % (where, value, typename))
        return
    if typename.startswith("list["):
        if not isinstance(value, list):
            faults.append("%s: not a list" % where)
            return
        for i, v in enumerate(value):
            check(v, typename[5:-1], "%s[%d]" % (where, i), faults)
        return
    if typename.startswith("dict("):
        if not isinstance(value, dict):
            faults.append("%s: not a map" % where)
            return
        inner = typename[5:-1].split(", ", 1)[1]
        for k, v in value.items():
            check(v, inner, "%s.%s" % (where, k), faults)
        return
    cls = getattr(k8s, typename, None)
    if cls is None:
        faults.append("%s: no type %s" % (where, typename))
        return
    if not isinstance(value, dict):
        faults.append("%s: not an object (%s)" % (where, typename))
        return
    by_json = {j: a for a, j in cls.attribute_map.items()}
    for k, v in value.items():
        if k not in by_json:
            faults.append("%s: %s has no field %r" % (where, typename, k))
            continue
        check(v, cls.openapi_types[by_json[k]], "%s.%s" % (where, k), faults)


def main(paths):
    bad = 0
    client = k8s.ApiClient()
    for path in paths:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d is not None]
        for d in docs:
            name = "%s %s/%s" % (path, d.get("kind"), (d.get("metadata") or {}).get("name"))
            prefix = GROUPS.get(d.get("apiVersion"))
            typename = prefix + str(d.get("kind")) if prefix else None
            faults = []
            if not typename or not hasattr(k8s, typename):
                faults.append("apiVersion %r kind %r: not a type this check knows" % (d.get("apiVersion"), d.get("kind")))
            else:
                check(d, typename, d["kind"], faults)
                try:  # required fields, as the client validates them
                    client._ApiClient__deserialize(d, typename)
                except (ValueError, TypeError) as e:
                    faults.append("%s: %s" % (typename, e))
            print("%s %s%s" % ("ok  " if not faults else "FAIL", name, "".join("\n    " + x for x in faults)))
            bad += bool(faults)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
