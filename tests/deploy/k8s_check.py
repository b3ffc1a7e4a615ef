#!/usr/bin/env python3
"""Checks of deploy/k8s (ctest DeployK8s.*): render an overlay with `kubectl kustomize`, then

  schema       every document against the Kubernetes OpenAPI schemas of kubernetes-validate in
               STRICT mode (unknown fields rejected), for each --k8s-version; ServiceMonitor and
               PodMonitor (no schema there) against k8s_monitor_schema.py, also strict;
  consistency  what no schema sees: Services select existing pods and name existing ports; the
               sizes agree (sift-ps replicas = --num-shards = the job spec's cluster.servers,
               sift-worker parallelism = completions = cluster.workers); every `sift` flag used
               in container args and probes exists in `sift <subcommand> --help` of the built
               binary; every $(VAR) resolves; the job spec of the ConfigMap passes
               `sift submit --dry-run`; its paths are mounted where they are used; a cuda job gets
               GPUs; pods run as non-root.

Usage:
  k8s_check.py --sift SIFT --kubectl KUBECTL overlay DIR [--with-component DIR ...]
  k8s_check.py --sift SIFT --kubectl KUBECTL rendered FILE
  k8s_check.py --sift SIFT --kubectl KUBECTL mutations DIR   (negative tests, see k8s_mutations.py)
Exit 0 when clean; 1 with one line per problem, each naming the document (Kind/name) and field.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import k8s_monitor_schema  # noqa: E402

WORKLOAD_KINDS = ("Deployment", "StatefulSet", "Job", "DaemonSet", "ReplicaSet")
DEFAULT_VERSIONS = ("1.29", "1.37")


def kn(doc):
    return f"{doc.get('kind', '?')}/{(doc.get('metadata') or {}).get('name', '?')}"


def render(kubectl, overlay, components=()):
    """Renders `overlay` (plus extra components, through a temporary kustomization)."""
    overlay = os.path.abspath(overlay)
    if not components:
        return _kustomize(kubectl, overlay)
    with tempfile.TemporaryDirectory() as tmp:
        # kustomize wants relative paths to bases and components.
        rel = lambda p: os.path.relpath(os.path.abspath(p), tmp)  # noqa: E731
        with open(os.path.join(tmp, "kustomization.yaml"), "w") as f:
            yaml.safe_dump({"apiVersion": "kustomize.config.k8s.io/v1beta1",
                            "kind": "Kustomization", "resources": [rel(overlay)],
                            "components": [rel(c) for c in components]}, f)
        return _kustomize(kubectl, tmp)


def _kustomize(kubectl, path):
    r = subprocess.run([kubectl, "kustomize", path], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"kubectl kustomize {path} failed:\n{r.stderr}")
    return r.stdout


def load_docs(text, source):
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        raise SystemExit(f"{source}: not YAML: {e}")
    if not docs:
        raise SystemExit(f"{source}: no documents")
    return docs


# ---- schema ----------------------------------------------------------------------------------

def schema_errors(docs, versions):
    import kubernetes_validate
    errors = []
    for doc in docs:
        if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc:
            errors.append(f"{kn(doc) if isinstance(doc, dict) else doc!r}: no kind/apiVersion")
            continue
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            errors += [f"{kn(doc)}: {e}" for e in k8s_monitor_schema.errors(doc)]
            continue
        for v in versions:
            try:
                kubernetes_validate.validate(doc, v, strict=True)
            except kubernetes_validate.ValidationError as e:
                path = ".".join(str(p) for p in e.absolute_path) or "(document)"
                errors.append(f"{kn(doc)}: {path}: {e.message} (Kubernetes {v} schema, strict)")
            except kubernetes_validate.SchemaNotFoundError as e:
                errors.append(f"{kn(doc)}: {e.message}")
    return errors


# ---- sift flags ------------------------------------------------------------------------------

class SiftHelp:
    """`sift ... --help` of the binary under test, cached: subcommands and flags."""

    def __init__(self, sift):
        self.sift = sift
        self.cache = {}

    def help(self, words):
        key = tuple(words)
        if key not in self.cache:
            r = subprocess.run([self.sift, *words, "--help"], capture_output=True, text=True)
            self.cache[key] = r.stdout if r.returncode == 0 else None
        return self.cache[key]

    def subcommands(self, words):
        text = self.help(words) or ""
        out, section = set(), None
        for line in text.splitlines():
            if re.match(r"^\S.*:$", line):
                section = line[:-1]
            elif section == "Subcommands" and line.startswith("  "):
                out.add(line.split()[0])
        return out

    def flags(self, words):
        out = set()
        for line in (self.help(words) or "").splitlines():
            s = line.strip()
            if s.startswith("-"):
                first = re.split(r"\s{2,}|\s(?=[A-Z\[])", s, maxsplit=1)[0]
                out.update(re.findall(r"(?:^|,)(--?[A-Za-z0-9][\w-]*)", first))
        return out


def sift_invocation(container):
    """The argv after `sift` when the container runs sift (image entrypoint or explicit)."""
    cmd, args = container.get("command"), container.get("args") or []
    if cmd:
        if os.path.basename(str(cmd[0])) != "sift":
            return None
        return [str(a) for a in cmd[1:]] + [str(a) for a in args]
    return [str(a) for a in args]  # the images' entrypoint is sift


def check_sift_argv(where, argv, helper):
    errors = []
    if not argv:
        return [f"{where}: runs sift with no subcommand"]
    words = []
    i = 0
    while i < len(argv) and not argv[i].startswith("-") and argv[i] in helper.subcommands(words):
        words.append(argv[i])
        i += 1
    if not words:
        return [f"{where}: `{argv[0]}` is not a sift subcommand"]
    if helper.subcommands(words):
        return [f"{where}: `sift {' '.join(words)}` needs a subcommand"]
    known = helper.flags(words)
    for a in argv[i:]:
        if a.startswith("-") and a != "-":
            flag = a.split("=", 1)[0]
            if flag not in known:
                errors.append(f"{where}: flag {flag} is not in `sift {' '.join(words)} --help`")
    return errors


# ---- consistency -----------------------------------------------------------------------------

def pod_spec(doc):
    return ((doc.get("spec") or {}).get("template") or {}).get("spec") or {}


def pod_labels(doc):
    return (((doc.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}


def containers_of(spec):
    return [("initContainers", c) for c in spec.get("initContainers") or []] + \
           [("containers", c) for c in spec.get("containers") or []]


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def label_selector_matches(sel, labels):
    """metav1.LabelSelector (matchLabels + matchExpressions In/NotIn/Exists/DoesNotExist)."""
    if not sel:
        return False
    if not all(labels.get(k) == v for k, v in (sel.get("matchLabels") or {}).items()):
        return False
    for e in sel.get("matchExpressions") or []:
        op, key, vals = e.get("operator"), e.get("key"), e.get("values") or []
        if op == "In" and labels.get(key) not in vals:
            return False
        if op == "NotIn" and labels.get(key) in vals:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def expand_vars(value, env, where, errors):
    """Kubelet's $(VAR) expansion from the container's env ($$ escapes)."""
    def sub(m):
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        if name not in env:
            errors.append(f"{where}: $({name}) is not an env var of the container "
                          f"(Kubernetes would pass it literally)")
            return m.group(0)
        return env[name] if env[name] is not None else f"<{name}>"
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", sub, value)


def container_env(c):
    """name -> literal value, or None for values from the downward API / refs."""
    return {e["name"]: e.get("value") if "valueFrom" not in e else None
            for e in c.get("env") or [] if "name" in e}


def flag_value(argv, flag):
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def mounted(c, path):
    return any(path == m.get("mountPath") or path.startswith(m.get("mountPath", "").rstrip("/") + "/")
               for m in c.get("volumeMounts") or [])


def dry_run_spec(sift, name, text):
    """`sift submit FILE --dry-run`: (normalized spec dict, None) or (None, error)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write(text)
        r = subprocess.run([sift, "submit", path, "--dry-run"], capture_output=True, text=True,
                           cwd=tmp)
        if r.returncode != 0:
            return None, (r.stderr.strip() or r.stdout.strip()).replace(tmp + "/", "")
        try:
            return yaml.safe_load(r.stdout), None
        except yaml.YAMLError as e:
            return None, f"`sift submit --dry-run` printed no YAML: {e}"


def consistency_errors(docs, sift):
    errors = []
    helper = SiftHelp(sift)
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d.get("kind"), {})[(d.get("metadata") or {}).get("name")] = d
    workloads = [d for d in docs if d.get("kind") in WORKLOAD_KINDS]
    services = by_kind.get("Service", {})
    configmaps = by_kind.get("ConfigMap", {})
    pvcs = by_kind.get("PersistentVolumeClaim", {})

    def ports_of(w):
        return [(p.get("name"), p.get("containerPort"))
                for _, c in containers_of(pod_spec(w)) for p in c.get("ports") or []]

    # Services select pods and name their ports.
    for name, svc in services.items():
        sel = (svc.get("spec") or {}).get("selector") or {}
        chosen = [w for w in workloads if selects(sel, pod_labels(w))]
        if not chosen:
            errors.append(f"Service/{name}: spec.selector {sel} selects no pod of the rendering")
            continue
        for i, p in enumerate((svc.get("spec") or {}).get("ports") or []):
            tp = p.get("targetPort", p.get("port"))
            for w in chosen:
                names = {n for n, _ in ports_of(w)}
                nums = {n for _, n in ports_of(w)}
                if (isinstance(tp, str) and tp not in names) or (isinstance(tp, int) and tp not in nums):
                    errors.append(f"Service/{name}: spec.ports[{i}].targetPort {tp!r} is no "
                                  f"container port of {kn(w)}")

    # Workloads: volumes, env refs, sift args, probes, scrape annotations, security.
    for w in workloads:
        spec = pod_spec(w)
        volumes = {v.get("name"): v for v in spec.get("volumes") or []}
        claim_templates = {(t.get("metadata") or {}).get("name")
                           for t in (w.get("spec") or {}).get("volumeClaimTemplates") or []}
        for vname, v in volumes.items():
            cm = (v.get("configMap") or {}).get("name")
            if cm is not None and cm not in configmaps:
                errors.append(f"{kn(w)}: volume {vname}: ConfigMap {cm} is not in the rendering")
            claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
            if claim is not None and claim not in pvcs:
                errors.append(f"{kn(w)}: volume {vname}: PersistentVolumeClaim {claim} is not in "
                              f"the rendering")
        sc = spec.get("securityContext") or {}
        if sc.get("runAsNonRoot") is not True or sc.get("runAsUser") != 10001:
            errors.append(f"{kn(w)}: spec.template.spec.securityContext must set runAsNonRoot: "
                          f"true and runAsUser: 10001 (the images' user sift)")
        sub = spec.get("subdomain")
        if sub is not None:
            s = services.get(sub)
            if s is None or (s.get("spec") or {}).get("clusterIP") != "None" or \
                    not selects((s.get("spec") or {}).get("selector"), pod_labels(w)):
                errors.append(f"{kn(w)}: spec.template.spec.subdomain {sub} is not a headless "
                              f"Service selecting these pods")
        ann = (((w.get("spec") or {}).get("template") or {}).get("metadata") or {}).get(
            "annotations") or {}
        scrape_port = ann.get("prometheus.io/port")
        for field, c in containers_of(spec):
            where = f"{kn(w)}: {field}[{c.get('name')}]"
            for m in c.get("volumeMounts") or []:
                if m.get("name") not in volumes and m.get("name") not in claim_templates:
                    errors.append(f"{where}: volumeMounts {m.get('name')} is no volume of the pod")
            env = container_env(c)
            argv = sift_invocation(c)
            if argv is None:
                continue
            argv = [expand_vars(a, env, where, errors) for a in argv]
            errors += check_sift_argv(where, argv, helper)
            for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                cmd = ((c.get(probe) or {}).get("exec") or {}).get("command")
                if cmd:
                    if os.path.basename(cmd[0]) == "sift":
                        errors += check_sift_argv(f"{where}.{probe}", list(map(str, cmd[1:])), helper)
                    hostport = next((a for a in cmd[2:] if re.match(r"^[\w.-]+:\d+$", str(a))), None)
                    ports = {p.get("containerPort") for p in c.get("ports") or []}
                    if hostport and int(hostport.rsplit(":", 1)[1]) not in ports:
                        errors.append(f"{where}.{probe}: {hostport} is no containerPort of the "
                                      f"container")
            mp = flag_value(argv, "--metrics-port")
            if field == "containers" and scrape_port is not None and mp is not None \
                    and mp != str(scrape_port):
                errors.append(f"{kn(w)}: annotation prometheus.io/port {scrape_port} != "
                              f"--metrics-port {mp} of {c.get('name')}")
            coord = flag_value(argv, "--coordinator")
            if coord is not None:
                host, _, port = coord.rpartition(":")
                s = services.get(host)
                if s is None or not any(str(p.get("port")) == port
                                        for p in (s.get("spec") or {}).get("ports") or []):
                    errors.append(f"{where}: --coordinator {coord} is no Service port of the "
                                  f"rendering")

    # Sizes: sift-ps, sift-worker and the job spec agree.
    sts = [d for d in docs if d.get("kind") == "StatefulSet"]
    servers = None
    for s in sts:
        replicas = (s.get("spec") or {}).get("replicas", 1)
        svc = services.get((s.get("spec") or {}).get("serviceName"))
        if svc is None or (svc.get("spec") or {}).get("clusterIP") != "None":
            errors.append(f"{kn(s)}: spec.serviceName must name a headless Service")
        for _, c in containers_of(pod_spec(s)):
            argv = sift_invocation(c)
            if not argv or argv[0] != "embedding-server":
                continue
            servers = replicas
            env = container_env(c)
            argv = [expand_vars(a, env, kn(s), []) for a in argv]
            shards = flag_value(argv, "--num-shards") or env.get("SIFT_NUM_SHARDS")
            if shards != str(replicas):
                errors.append(f"{kn(s)}: spec.replicas ({replicas}) != --num-shards ({shards}) of "
                              f"container {c.get('name')}: every shard needs exactly one server")
            shard = flag_value(argv, "--shard") or env.get("SIFT_SHARD")
            if shard != "ordinal":
                errors.append(f"{kn(s)}: container {c.get('name')}: --shard must be `ordinal` "
                              f"(the pod's StatefulSet index), not {shard!r}")
    worker_jobs = []
    for j in by_kind.get("Job", {}).values():
        for _, c in containers_of(pod_spec(j)):
            argv = sift_invocation(c)
            if argv and argv[0] == "worker":
                worker_jobs.append((j, c))
    workers = None
    for j, _ in worker_jobs:
        js = j.get("spec") or {}
        workers = js.get("parallelism", 1)
        if js.get("completionMode") != "Indexed":
            errors.append(f"{kn(j)}: spec.completionMode must be Indexed")
        if js.get("completions") != workers:
            errors.append(f"{kn(j)}: spec.completions ({js.get('completions')}) != "
                          f"spec.parallelism ({workers})")

    # The job spec: the ConfigMap the submit Job mounts.
    for j in by_kind.get("Job", {}).values():
        for _, c in containers_of(pod_spec(j)):
            argv = sift_invocation(c)
            if not argv or argv[0] != "submit":
                continue
            spec_path = next((a for a in argv[1:] if not a.startswith("-")), None)
            where = f"{kn(j)}: container {c.get('name')}"
            mount = next((m for m in c.get("volumeMounts") or []
                          if spec_path and spec_path.startswith(m.get("mountPath", "").rstrip("/") + "/")),
                         None)
            vol = mount and next((v for v in pod_spec(j).get("volumes") or []
                                  if v.get("name") == mount.get("name")), None)
            cm = configmaps.get(((vol or {}).get("configMap") or {}).get("name"))
            key = spec_path and os.path.relpath(spec_path, mount["mountPath"]) if mount else None
            if cm is None or key not in (cm.get("data") or {}):
                errors.append(f"{where}: {spec_path} is not a key of a mounted ConfigMap")
                continue
            text = cm["data"][key]
            spec, err = dry_run_spec(sift, key, text)
            if err:
                errors.append(f"{kn(cm)}: data.{key}: `sift submit --dry-run` rejects it: {err}")
                continue
            cl = spec.get("cluster") or {}
            if servers is not None and cl.get("servers") != servers:
                errors.append(f"{kn(cm)}: data.{key}: cluster.servers ({cl.get('servers')}) != "
                              f"StatefulSet sift-ps spec.replicas ({servers})")
            if workers is not None and cl.get("workers") != workers:
                errors.append(f"{kn(cm)}: data.{key}: cluster.workers ({cl.get('workers')}) != "
                              f"Job spec.parallelism ({workers}) of the workers")
            for wj, wc in worker_jobs:
                gpus = ((wc.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu")
                if cl.get("backend") == "cuda" and not gpus:
                    errors.append(f"{kn(wj)}: container {wc.get('name')}: the job spec says "
                                  f"cluster.backend: cuda but resources.limits has no nvidia.com/gpu")
                if cl.get("backend") != "cuda" and gpus:
                    errors.append(f"{kn(wj)}: container {wc.get('name')}: requests nvidia.com/gpu "
                                  f"but the job spec's cluster.backend is {cl.get('backend')}")
                for field in ("dataset", "checkpoint.dir"):
                    value = spec.get(field) if field == "dataset" else (spec.get("checkpoint") or {}).get("dir")
                    if value and not mounted(wc, value):
                        errors.append(f"{kn(wj)}: container {wc.get('name')}: the job spec's "
                                      f"{field} {value} is on no volume mounted in the workers")
            rd = spec.get("results_dir")
            for d in by_kind.get("Deployment", {}).values():
                for _, c in containers_of(pod_spec(d)):
                    a = sift_invocation(c)
                    if a and a[0] == "coordinator" and rd and not mounted(c, rd):
                        errors.append(f"{kn(d)}: the job spec's results_dir {rd} is on no volume "
                                      f"mounted in the coordinator (it writes it)")

    # Monitors select what exists and name existing ports.
    for m in by_kind.get("ServiceMonitor", {}).values():
        sel = (m.get("spec") or {}).get("selector")
        chosen = [s for s in services.values()
                  if label_selector_matches(sel, (s.get("metadata") or {}).get("labels") or {})]
        if not chosen:
            errors.append(f"{kn(m)}: spec.selector selects no Service of the rendering")
        for i, e in enumerate((m.get("spec") or {}).get("endpoints") or []):
            for s in chosen:
                if e.get("port") and e["port"] not in {p.get("name") for p in s["spec"].get("ports") or []}:
                    errors.append(f"{kn(m)}: spec.endpoints[{i}].port {e['port']} is no port of "
                                  f"{kn(s)}")
    for m in by_kind.get("PodMonitor", {}).values():
        sel = (m.get("spec") or {}).get("selector")
        chosen = [w for w in workloads if label_selector_matches(sel, pod_labels(w))]
        if not chosen:
            errors.append(f"{kn(m)}: spec.selector selects no pod of the rendering")
        for i, e in enumerate((m.get("spec") or {}).get("podMetricsEndpoints") or []):
            for w in chosen:
                if e.get("port") and e["port"] not in {n for n, _ in ports_of(w)}:
                    errors.append(f"{kn(m)}: spec.podMetricsEndpoints[{i}].port {e['port']} is no "
                                  f"container port of {kn(w)}")
    return errors


def check_docs(docs, sift, versions):
    return schema_errors(docs, versions) + consistency_errors(docs, sift)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sift", required=True)
    ap.add_argument("--kubectl", default="kubectl")
    ap.add_argument("--k8s-version", action="append", dest="versions")
    sub = ap.add_subparsers(dest="mode", required=True)
    o = sub.add_parser("overlay")
    o.add_argument("dir")
    o.add_argument("--with-component", action="append", default=[])
    r = sub.add_parser("rendered")
    r.add_argument("file")
    m = sub.add_parser("mutations")
    m.add_argument("dir")
    args = ap.parse_args()
    versions = args.versions or list(DEFAULT_VERSIONS)
    args.sift = os.path.abspath(args.sift)
    if not os.access(args.sift, os.X_OK):
        raise SystemExit(f"--sift {args.sift}: not an executable")
    if args.mode == "mutations":
        import k8s_mutations
        return k8s_mutations.run(args, versions)
    if args.mode == "overlay":
        text = render(args.kubectl, args.dir, args.with_component)
        source = args.dir + "".join(f" + {c}" for c in args.with_component)
    else:
        with open(args.file) as f:
            text = f.read()
        source = args.file
    docs = load_docs(text, source)
    errors = check_docs(docs, args.sift, versions)
    for e in errors:
        print(f"{source}: {e}")
    if errors:
        return 1
    kinds = sorted(kn(d) for d in docs)
    print(f"{source}: {len(docs)} documents valid (Kubernetes {', '.join(versions)}, strict) and "
          f"consistent: {', '.join(kinds)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
