"""Negative tests of k8s_check.py (ctest DeployK8s.Mutations): the checks must be able to fail.

The overlay is rendered once (with the monitoring component); the unmutated rendering must pass.
Then each mutation below is applied to a copy of the rendered documents, written to a temporary
file and checked like any rendering; each must be rejected with a message naming the document
and the field. The mutations live here, not as manifests a user could apply.
"""

import copy
import os
import sys
import tempfile

import yaml

import k8s_check


def _find(docs, kind, name_prefix):
    for d in docs:
        if d.get("kind") == kind and d["metadata"]["name"].startswith(name_prefix):
            return d
    raise KeyError(f"{kind}/{name_prefix}* not in the rendering")


def _container(doc, name):
    spec = doc["spec"]["template"]["spec"]
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        if c["name"] == name:
            return c
    raise KeyError(f"container {name} not in {k8s_check.kn(doc)}")


def _rename_replicas(docs):
    s = _find(docs, "StatefulSet", "sift-ps")["spec"]
    s["replica"] = s.pop("replicas")


def _replicas_string(docs):
    _find(docs, "StatefulSet", "sift-ps")["spec"]["replicas"] = "two"


def _num_shards(docs):
    c = _container(_find(docs, "StatefulSet", "sift-ps"), "embedding-server")
    next(e for e in c["env"] if e["name"] == "SIFT_NUM_SHARDS")["value"] = "3"


def _servicemonitor_typo(docs):
    ep = _find(docs, "ServiceMonitor", "sift")["spec"]["endpoints"][0]
    ep["prot"] = ep.pop("port")


def _podmonitor_bad_interval(docs):
    _find(docs, "PodMonitor", "sift-worker")["spec"]["podMetricsEndpoints"][0]["interval"] = "15 s"


def _job_spec_typo(docs):
    cm = _find(docs, "ConfigMap", "sift-job")
    cm["data"]["job.yaml"] = cm["data"]["job.yaml"].replace("epochs: 3", "epoch: 3")
    assert "epoch: 3" in cm["data"]["job.yaml"]


def _job_spec_workers(docs):
    cm = _find(docs, "ConfigMap", "sift-job")
    cm["data"]["job.yaml"] = cm["data"]["job.yaml"].replace("workers: 2", "workers: 4")
    assert "workers: 4" in cm["data"]["job.yaml"]


def _job_spec_servers(docs):
    cm = _find(docs, "ConfigMap", "sift-job")
    cm["data"]["job.yaml"] = cm["data"]["job.yaml"].replace("servers: 2", "servers: 3")
    assert "servers: 3" in cm["data"]["job.yaml"]


def _worker_parallelism(docs):
    _find(docs, "Job", "sift-worker")["spec"]["parallelism"] = 3


def _unknown_sift_flag(docs):
    c = _container(_find(docs, "Job", "sift-worker"), "worker")
    c["args"] = [a.replace("--advertise-host", "--advertise-hots") for a in c["args"]]


def _unresolved_var(docs):
    c = _container(_find(docs, "Job", "sift-worker"), "worker")
    c["env"] = [e for e in c["env"] if e["name"] != "POD_IP"]


def _service_selector(docs):
    _find(docs, "Service", "sift-coordinator")["spec"]["selector"][
        "app.kubernetes.io/component"] = "coordinater"


def _service_port_name(docs):
    _find(docs, "Service", "sift-ps")["spec"]["ports"][1]["targetPort"] = "metric"


def _dataset_not_mounted(docs):
    c = _container(_find(docs, "Job", "sift-worker"), "worker")
    c["volumeMounts"] = [m for m in c["volumeMounts"] if m["mountPath"] != "/data"]


def _gpu_without_cuda(docs):
    c = _container(_find(docs, "Job", "sift-worker"), "worker")
    c["resources"]["limits"]["nvidia.com/gpu"] = 1


def _root_user(docs):
    _find(docs, "Deployment", "sift-coordinator")["spec"]["template"]["spec"][
        "securityContext"]["runAsUser"] = 0


def _rule_differs(docs):
    g = _find(docs, "PrometheusRule", "sift")["spec"]["groups"][1]["rules"]
    next(r for r in g if r.get("alert") == "SiftEmbeddingServerDown")["for"] = "5m"


def _rule_typo(docs):
    r = _find(docs, "PrometheusRule", "sift")["spec"]["groups"][0]["rules"][0]
    r["exp"] = r.pop("expr")


def _no_prometheus_rule(docs):
    docs.remove(_find(docs, "PrometheusRule", "sift"))


def _role_relabel(docs):
    r = _find(docs, "ServiceMonitor", "sift")["spec"]["endpoints"][0]["relabelings"][0]
    r["regex"] = "(coordinator|worker)"


def _index_relabel(docs):
    rs = _find(docs, "ServiceMonitor", "sift")["spec"]["endpoints"][0]["relabelings"]
    # an index from every pod name's last dash: the coordinator's random suffix is digits
    rs[:] = [r for r in rs if r.get("targetLabel") != "index"] + [
        {"sourceLabels": ["__meta_kubernetes_pod_name"], "regex": ".*-([0-9]+)",
         "targetLabel": "index", "replacement": "$1"}]


def _worker_index_relabel(docs):
    rs = _find(docs, "PodMonitor", "sift-worker")["spec"]["podMetricsEndpoints"][0]["relabelings"]
    rs[:] = [r for r in rs if r.get("targetLabel") != "index"]


def _relabel_typo(docs):
    r = _find(docs, "PodMonitor", "sift-worker")["spec"]["podMetricsEndpoints"][0][
        "relabelings"][0]
    r["target_label"] = r.pop("targetLabel")


def _double_scrape(docs):
    _find(docs, "StatefulSet", "sift-ps")["spec"]["template"]["metadata"]["annotations"] = {
        "prometheus.io/scrape": "true", "prometheus.io/port": "9100",
        "prometheus.io/path": "/metrics"}


def _annotation_port(docs):
    for d in [d for d in docs if d["apiVersion"].startswith("monitoring.coreos.com/")]:
        docs.remove(d)
    _find(docs, "StatefulSet", "sift-ps")["spec"]["template"]["metadata"]["annotations"] = {
        "prometheus.io/scrape": "true", "prometheus.io/port": "9101",
        "prometheus.io/path": "/metrics"}


def _worker_restart_on_failure(docs):
    _find(docs, "Job", "sift-worker")["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"


def _worker_exit_code(docs):
    rules = _find(docs, "Job", "sift-worker")["spec"]["podFailurePolicy"]["rules"]
    next(r for r in rules if "onExitCodes" in r)["onExitCodes"]["values"] = [4]


def _worker_no_disruption_rule(docs):
    p = _find(docs, "Job", "sift-worker")["spec"]["podFailurePolicy"]
    p["rules"] = [r for r in p["rules"] if "onPodConditions" not in r]


def _submit_ignores_disruption(docs):
    _find(docs, "Job", "sift-submit")["spec"]["podFailurePolicy"]["rules"].append(
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]})


def _submit_exit_container(docs):
    rules = _find(docs, "Job", "sift-submit")["spec"]["podFailurePolicy"]["rules"]
    rules[0]["onExitCodes"]["containerName"] = "sbumit"


def _shard_source(docs):
    c = _container(_find(docs, "StatefulSet", "sift-ps"), "embedding-server")
    c["env"] = [e for e in c["env"] if e["name"] != "SIFT_SHARD"]


# (name, mutation, substrings every one of which must appear in one error line)
MUTATIONS = [
    ("unknown field replica:", _rename_replicas,
     ["StatefulSet/sift-ps", "spec", "'replica' was unexpected"]),
    ("replicas: \"two\"", _replicas_string,
     ["StatefulSet/sift-ps", "spec.replicas", "'two' is not of type 'integer'"]),
    ("num-shards mismatch", _num_shards,
     ["StatefulSet/sift-ps", "spec.replicas (2) != --num-shards (3)"]),
    ("ServiceMonitor typo", _servicemonitor_typo,
     ["ServiceMonitor/sift", "spec.endpoints.0", "'prot' was unexpected"]),
    ("PodMonitor bad duration", _podmonitor_bad_interval,
     ["PodMonitor/sift-worker", "spec.podMetricsEndpoints.0.interval", "'15 s'"]),
    ("bad job spec", _job_spec_typo,
     ["ConfigMap/sift-job", "data.job.yaml", "dry-run", "training.epoch"]),
    ("cluster.workers mismatch", _job_spec_workers,
     ["ConfigMap/sift-job", "cluster.workers (4) != Job spec.parallelism (2)"]),
    ("cluster.servers mismatch", _job_spec_servers,
     ["ConfigMap/sift-job", "cluster.servers (3) != StatefulSet sift-ps spec.replicas (2)"]),
    ("worker parallelism mismatch", _worker_parallelism,
     ["Job/sift-worker", "spec.completions (2) != spec.parallelism (3)"]),
    ("unknown sift flag", _unknown_sift_flag,
     ["Job/sift-worker", "containers[worker]", "--advertise-hots", "sift worker --help"]),
    ("unresolved $(VAR)", _unresolved_var,
     ["Job/sift-worker", "containers[worker]", "$(POD_IP)"]),
    ("Service selects nothing", _service_selector,
     ["Service/sift-coordinator", "spec.selector", "selects no pod"]),
    ("Service names a missing port", _service_port_name,
     ["Service/sift-ps", "spec.ports[1].targetPort 'metric'"]),
    ("dataset not mounted", _dataset_not_mounted,
     ["Job/sift-worker", "dataset /data/tiny", "no volume mounted"]),
    ("GPU with cluster.backend cpu", _gpu_without_cuda,
     ["Job/sift-worker", "nvidia.com/gpu", "cluster.backend is cpu"]),
    ("runs as root", _root_user,
     ["Deployment/sift-coordinator", "securityContext", "runAsUser: 10001"]),
    ("PrometheusRule differs from rules.yml", _rule_differs,
     ["PrometheusRule/sift", "spec.groups differs from", "rules.yml", "sift-alerts"]),
    ("PrometheusRule typo", _rule_typo,
     ["PrometheusRule/sift", "spec.groups.0.rules.0", "'exp' was unexpected"]),
    ("monitors without PrometheusRule", _no_prometheus_rule,
     ["the rendering has monitors but no PrometheusRule", "rules.yml"]),
    ("no role for the servers", _role_relabel,
     ["ServiceMonitor/sift", "spec.endpoints[0].relabelings", "pod sift-ps-1",
      "role=None", "expected role='embedding-server'"]),
    ("index from any pod name", _index_relabel,
     ["ServiceMonitor/sift", "pod sift-coordinator-", "index='24567'", "index='0'"]),
    ("no worker index", _worker_index_relabel,
     ["PodMonitor/sift-worker", "spec.podMetricsEndpoints[0].relabelings", "pod sift-worker-1-",
      "index=None"]),
    ("relabeling typo", _relabel_typo,
     ["PodMonitor/sift-worker", "spec.podMetricsEndpoints.0.relabelings.0",
      "'target_label' was unexpected"]),
    ("double scraping", _double_scrape,
     ["StatefulSet/sift-ps", "prometheus.io/scrape", "ServiceMonitor/sift", "twice"]),
    ("annotation scrape port", _annotation_port,
     ["prometheus-annotations.yml", "pod sift-ps-0", "10.0.0.7:9101"]),
    ("podFailurePolicy with OnFailure", _worker_restart_on_failure,
     ["Job/sift-worker", "podFailurePolicy needs", "restartPolicy: Never"]),
    ("worker exit 3 not FailJob", _worker_exit_code,
     ["Job/sift-worker", "spec.podFailurePolicy", "FailJob rule on exit code 3"]),
    ("worker disruption counted", _worker_no_disruption_rule,
     ["Job/sift-worker", "spec.podFailurePolicy", "Ignore rule", "DisruptionTarget"]),
    ("submit retried after disruption", _submit_ignores_disruption,
     ["Job/sift-submit", "spec.podFailurePolicy", "second time"]),
    ("submit exit codes of no container", _submit_exit_container,
     ["Job/sift-submit", "containerName sbumit is no container"]),
    ("shard not from pod-index", _shard_source,
     ["StatefulSet/sift-ps", "SIFT_SHARD", "apps.kubernetes.io/pod-index"]),
]


def run(args, versions):
    monitoring = os.path.join(os.path.abspath(args.dir), "..", "..", "components", "monitoring")
    text = k8s_check.render(args.kubectl, args.dir, [monitoring])
    base = k8s_check.load_docs(text, args.dir)
    check = lambda docs: k8s_check.check_docs(docs, args.sift, versions,  # noqa: E731
                                              args.deploy_dir, args.promtool)
    clean = check(base)
    if clean:
        print("the unmutated rendering is not clean:\n  " + "\n  ".join(clean))
        return 1
    print(f"{args.dir} + components/monitoring: clean ({len(base)} documents)")
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, mutate, expected) in enumerate(MUTATIONS):
            docs = copy.deepcopy(base)
            mutate(docs)
            path = os.path.join(tmp, f"mutation-{i}.yaml")
            with open(path, "w") as f:
                yaml.safe_dump_all(docs, f, sort_keys=False)
            with open(path) as f:  # checked as written, like any rendering
                errors = check(k8s_check.load_docs(f.read(), path))
            hit = next((e for e in errors if all(s in e for s in expected)), None)
            if hit:
                print(f"ok   {name}: rejected: {hit}")
            else:
                failures += 1
                print(f"FAIL {name}: expected an error containing {expected}; got "
                      + ("\n       " + "\n       ".join(errors) if errors else "no error"))
    print(f"{len(MUTATIONS) - failures}/{len(MUTATIONS)} mutations rejected as expected")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit("run through k8s_check.py mutations DIR")
