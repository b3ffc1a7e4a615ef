"""Negative tests of k8s_check.py (ctest DeployK8s.Mutations): the checks must be able to fail.

The overlay is rendered once (with the monitoring and cert-manager components; the shipped
overlays include components/security); the unmutated rendering must pass.
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


def _server_on_loopback(docs):
    # Neither --bind nor TLS (which listens on every interface): 127.0.0.1 only.
    c = _container(_find(docs, "StatefulSet", "sift-ps"), "embedding-server")
    c["args"] = [a for a in c["args"] if not a.startswith("--bind")]
    c["env"] = [e for e in c.get("env") or [] if e["name"] != "SIFT_TLS_DIR"]


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


def _env(c, name):
    return next(e for e in c["env"] if e["name"] == name)


def _volume(doc, name):
    return next(v for v in doc["spec"]["template"]["spec"]["volumes"] if v["name"] == name)


def _coordinator_no_tls(docs):
    c = _container(_find(docs, "Deployment", "sift-coordinator"), "coordinator")
    c["env"] = [e for e in c["env"] if e["name"] != "SIFT_TLS_DIR"]


def _key_readable(docs):
    _volume(_find(docs, "Deployment", "sift-coordinator"), "tls")["secret"]["defaultMode"] = 0o644


def _tls_dir_not_mounted(docs):
    c = _container(_find(docs, "Job", "sift-worker"), "worker")
    _env(c, "SIFT_TLS_DIR")["value"] = "/etc/sift/certs"


def _server_secrets_swapped(docs):
    _volume(_find(docs, "StatefulSet", "sift-ps"), "tls-server-1")["secret"][
        "secretName"] = "sift-server-0-tls"


def _server_secret_missing(docs):
    sts = _find(docs, "StatefulSet", "sift-ps")
    spec = sts["spec"]["template"]["spec"]
    spec["volumes"] = [v for v in spec["volumes"] if v["name"] != "tls-server-1"]
    c = _container(sts, "embedding-server")
    c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] != "tls-server-1"]


def _server_one_cert(docs):
    c = _container(_find(docs, "StatefulSet", "sift-ps"), "embedding-server")
    _env(c, "SIFT_TLS_DIR")["value"] = "/etc/sift/tls/server-0"


def _no_tokens_file(docs):
    c = _container(_find(docs, "Deployment", "sift-coordinator"), "coordinator")
    c["env"] = [e for e in c["env"] if e["name"] != "SIFT_TOKENS_FILE"]


def _tokens_env_typo(docs):
    c = _container(_find(docs, "Deployment", "sift-coordinator"), "coordinator")
    _env(c, "SIFT_TOKENS_FILE")["name"] = "SIFT_TOKEN_FILE"


def _probe_plaintext(docs):
    c = _container(_find(docs, "Deployment", "sift-coordinator"), "coordinator")
    cmd = c["readinessProbe"]["exec"]["command"]
    cmd[:] = [a for a in cmd if not a.startswith("--tls-dir")]


def _probe_shard_dir(docs):
    c = _container(_find(docs, "StatefulSet", "sift-ps"), "embedding-server")
    cmd = c["livenessProbe"]["exec"]["command"]
    cmd[:] = [a if not a.startswith("--tls-dir") else "--tls-dir=/etc/sift/tls/server-{shard}"
              for a in cmd]


def _submit_no_token(docs):
    c = _container(_find(docs, "Job", "sift-submit"), "submit")
    c["env"] = [e for e in c["env"] if e["name"] != "SIFT_TOKEN_FILE"]


def _token_not_secret(docs):
    c = _container(_find(docs, "Job", "sift-submit"), "submit")
    _env(c, "SIFT_TOKEN_FILE")["value"] = "/etc/sift/job/job.yaml"


def _submit_no_fsgroup(docs):
    del _find(docs, "Job", "sift-submit")["spec"]["template"]["spec"]["securityContext"]["fsGroup"]


def _mount_writable(docs):
    c = _container(_find(docs, "Job", "sift-worker"), "worker")
    next(m for m in c["volumeMounts"] if m["name"] == "tls")["readOnly"] = False


def _advertise_pod_ip(docs):
    c = _container(_find(docs, "StatefulSet", "sift-ps"), "embedding-server")
    c["args"] = [a if not a.startswith("--advertise-host") else "--advertise-host=$(POD_IP)"
                 for a in c["args"]]
    c["env"].append({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})


def _cert_wrong_cn(docs):
    _find(docs, "Certificate", "sift-server-1")["spec"]["commonName"] = "server-0"


def _cert_missing_dns(docs):
    spec = _find(docs, "Certificate", "sift-server-1")["spec"]
    spec["dnsNames"] = [n for n in spec["dnsNames"] if n != "sift-ps-1.sift-ps"]


def _cert_coordinator_dns(docs):
    spec = _find(docs, "Certificate", "sift-coordinator")["spec"]
    spec["dnsNames"] = [n for n in spec["dnsNames"] if n != "sift-coordinator"]


def _cert_typo(docs):
    spec = _find(docs, "Certificate", "sift-worker")["spec"]
    spec["dnsName"] = spec.pop("dnsNames")


def _cert_missing(docs):
    docs.remove(_find(docs, "Certificate", "sift-worker"))


def _cert_no_client_auth(docs):
    spec = _find(docs, "Certificate", "sift-worker")["spec"]
    spec["usages"] = [u for u in spec["usages"] if u != "client auth"]


def _cert_two_issuers(docs):
    _find(docs, "Certificate", "sift-server-0")["spec"]["issuerRef"]["name"] = "sift-selfsigned"


def _monitor_grpc_port(docs):
    for d in docs:
        if d.get("kind") == "Service" and d["metadata"]["name"] == "sift-ps":
            for p in d["spec"]["ports"]:
                p["name"] = {"grpc": "metrics", "metrics": "grpc"}[p["name"]]


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
    ("server listens on loopback", _server_on_loopback,
     ["StatefulSet/sift-ps", "containers[embedding-server]", "without --bind or --tls-dir"]),
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
    # security (components/security, components/cert-manager)
    ("coordinator without TLS", _coordinator_no_tls,
     ["Deployment/sift-coordinator", "containers[coordinator]", "TLS is off", "SIFT_TLS_DIR"]),
    ("key readable by others", _key_readable,
     ["Deployment/sift-coordinator", "volumes[tls]", "defaultMode 0644", "tls.key",
      "defaultMode: 0400"]),
    ("TLS dir not mounted", _tls_dir_not_mounted,
     ["Job/sift-worker", "containers[worker]", "/etc/sift/certs is on no volumeMount"]),
    ("server Secrets swapped", _server_secrets_swapped,
     ["StatefulSet/sift-ps", "volumes[tls-server-1]", "sift-server-0-tls",
      "expected sift-server-1-tls"]),
    ("a shard's Secret not mounted", _server_secret_missing,
     ["StatefulSet/sift-ps", "(shard 1)", "/etc/sift/tls/server-1 is on no volumeMount"]),
    ("one certificate for every shard", _server_one_cert,
     ["StatefulSet/sift-ps", "same for all 2 shards", "{shard}"]),
    ("coordinator without tokens", _no_tokens_file,
     ["Deployment/sift-coordinator", "no --tokens-file or SIFT_TOKENS_FILE"]),
    ("SIFT_TOKEN_FILE on the coordinator", _tokens_env_typo,
     ["Deployment/sift-coordinator", "env SIFT_TOKEN_FILE", "sift coordinator --help", "ignored"]),
    ("probe without --tls-dir", _probe_plaintext,
     ["Deployment/sift-coordinator", "readinessProbe", "no --tls-dir"]),
    ("probe with {shard}", _probe_shard_dir,
     ["StatefulSet/sift-ps", "livenessProbe", "does not expand {shard}"]),
    ("submit without a token", _submit_no_token,
     ["Job/sift-submit", "containers[submit]", "no --token-file or SIFT_TOKEN_FILE"]),
    ("token on a ConfigMap", _token_not_secret,
     ["Job/sift-submit", "/etc/sift/job/job.yaml", "no Secret volume"]),
    ("no fsGroup for 0400 Secrets", _submit_no_fsgroup,
     ["Job/sift-submit", "securityContext has no fsGroup", "0400"]),
    ("Secret mounted writable", _mount_writable,
     ["Job/sift-worker", "volumeMount tls", "readOnly: true"]),
    ("server advertises its pod IP", _advertise_pod_ip,
     ["StatefulSet/sift-ps", "--advertise-host $(POD_IP)", "a pod IP is in no certificate"]),
    ("Certificate with another shard's CN", _cert_wrong_cn,
     ["Certificate/sift-server-1", "spec.commonName 'server-0' != 'server-1'"]),
    ("Certificate without the server's DNS name", _cert_missing_dns,
     ["Certificate/sift-server-1", "spec.dnsNames lacks sift-ps-1.sift-ps"]),
    ("Certificate without the coordinator's Service name", _cert_coordinator_dns,
     ["Certificate/sift-coordinator", "spec.dnsNames lacks sift-coordinator"]),
    ("Certificate typo", _cert_typo,
     ["Certificate/sift-worker", "spec", "'dnsName' was unexpected"]),
    ("Secret without a Certificate", _cert_missing,
     ["Secret sift-worker-tls", "Job/sift-worker", "no Certificate"]),
    ("Certificate without client auth", _cert_no_client_auth,
     ["Certificate/sift-worker", "spec.usages lacks 'client auth'"]),
    ("members from two issuers", _cert_two_issuers,
     ["Certificate/sift-server-0", "spec.issuerRef Issuer/sift-selfsigned", "one CA"]),
    ("ServiceMonitor scrapes the gRPC port", _monitor_grpc_port,
     ["ServiceMonitor/sift", "spec.endpoints[0].port metrics", "container port 7000",
      "--metrics-port [9100]"]),
]


def run(args, versions):
    components = os.path.join(os.path.abspath(args.dir), "..", "..", "components")
    text = k8s_check.render(args.kubectl, args.dir, [os.path.join(components, "monitoring"),
                                                     os.path.join(components, "cert-manager")])
    base = k8s_check.load_docs(text, args.dir)
    check = lambda docs: k8s_check.check_docs(docs, args.sift, versions,  # noqa: E731
                                              args.deploy_dir, args.promtool)
    clean = check(base)
    if clean:
        print("the unmutated rendering is not clean:\n  " + "\n  ".join(clean))
        return 1
    print(f"{args.dir} + components/monitoring + components/cert-manager: clean ({len(base)} "
          f"documents)")
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
