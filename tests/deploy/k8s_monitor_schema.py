"""A strict JSON schema of the Prometheus Operator's ServiceMonitor, PodMonitor and PrometheusRule
(monitoring.coreos.com/v1), which kubernetes-validate does not bundle. The allowed keys are the
JSON names of ServiceMonitorSpec, Endpoint, PodMonitorSpec, PodMetricsEndpoint, RelabelConfig,
PrometheusRuleSpec, RuleGroup and Rule in prometheus-operator pkg/apis/monitoring/v1
(servicemonitor_types.go, podmonitor_types.go, types.go, prometheusrule_types.go); every object
is closed (additionalProperties: false), so a typo is an error. The nested auth/TLS objects are
only type-checked (objects), since sift's monitors use none.
"""

import jsonschema

_DURATION = {"type": "string",
             "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?"
                        r"(([0-9]+)s)?(([0-9]+)ms)?)$"}
_UINT = {"type": "integer", "minimum": 0}
_STRINGS = {"type": "array", "items": {"type": "string"}}
_OBJ = {"type": "object"}
_OBJS = {"type": "array", "items": {"type": "object"}}

_LABEL_SELECTOR = {
    "type": "object", "additionalProperties": False,
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["key", "operator"],
            "properties": {"key": {"type": "string"},
                           "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                           "values": _STRINGS}}},
    },
}
_NAMESPACE_SELECTOR = {"type": "object", "additionalProperties": False,
                       "properties": {"any": {"type": "boolean"}, "matchNames": _STRINGS}}
_ATTACH_METADATA = {"type": "object", "additionalProperties": False,
                    "properties": {"node": {"type": "boolean"}}}
_SCRAPE_PROTOCOLS = {"type": "array", "items": {"enum": [
    "PrometheusProto", "OpenMetricsText0.0.1", "OpenMetricsText1.0.0", "PrometheusText0.0.4",
    "PrometheusText1.0.0"]}}

# RelabelConfig (types.go): actions in either case, as the operator accepts them.
_ACTIONS = ["replace", "keep", "drop", "hashmod", "labelmap", "labeldrop", "labelkeep",
            "lowercase", "uppercase", "keepequal", "dropequal"]
_RELABEL = {"type": "object", "additionalProperties": False,
            "properties": {
                "sourceLabels": {"type": "array",
                                 "items": {"type": "string",
                                           "pattern": r"^[a-zA-Z_][a-zA-Z0-9_]*$"}},
                "separator": {"type": "string"},
                "targetLabel": {"type": "string"},
                "regex": {"type": "string"},
                "modulus": _UINT,
                "replacement": {"type": "string"},
                "action": {"enum": _ACTIONS + [a.capitalize() for a in _ACTIONS]
                           + ["HashMod", "LabelMap", "LabelDrop", "LabelKeep", "KeepEqual",
                              "DropEqual"]},
            }}
_RELABELS = {"type": "array", "items": _RELABEL}

# Endpoint fields shared by ServiceMonitor endpoints and PodMonitor podMetricsEndpoints.
_ENDPOINT_COMMON = {
    "port": {"type": "string"},
    "targetPort": {"type": ["string", "integer"]},
    "path": {"type": "string"},
    "scheme": {"enum": ["http", "https"]},
    "params": {"type": "object", "additionalProperties": _STRINGS},
    "interval": _DURATION,
    "scrapeTimeout": _DURATION,
    "tlsConfig": _OBJ,
    "bearerTokenSecret": _OBJ,
    "authorization": _OBJ,
    "honorLabels": {"type": "boolean"},
    "honorTimestamps": {"type": "boolean"},
    "trackTimestampsStaleness": {"type": "boolean"},
    "basicAuth": _OBJ,
    "oauth2": _OBJ,
    "metricRelabelings": _RELABELS,
    "relabelings": _RELABELS,
    "proxyUrl": {"type": "string"},
    "noProxy": {"type": "string"},
    "proxyFromEnvironment": {"type": "boolean"},
    "proxyConnectHeader": _OBJ,
    "followRedirects": {"type": "boolean"},
    "enableHttp2": {"type": "boolean"},
    "filterRunning": {"type": "boolean"},
}
_SERVICE_ENDPOINT = {"type": "object", "additionalProperties": False,
                     "properties": dict(_ENDPOINT_COMMON, bearerTokenFile={"type": "string"})}
_POD_ENDPOINT = {"type": "object", "additionalProperties": False,
                 "properties": dict(_ENDPOINT_COMMON, portNumber={"type": "integer"})}

_SPEC_COMMON = {
    "jobLabel": {"type": "string"},
    "podTargetLabels": _STRINGS,
    "selector": _LABEL_SELECTOR,
    "namespaceSelector": _NAMESPACE_SELECTOR,
    "sampleLimit": _UINT,
    "targetLimit": _UINT,
    "scrapeProtocols": _SCRAPE_PROTOCOLS,
    "labelLimit": _UINT,
    "labelNameLengthLimit": _UINT,
    "labelValueLengthLimit": _UINT,
    "keepDroppedTargets": _UINT,
    "attachMetadata": _ATTACH_METADATA,
    "scrapeClass": {"type": "string", "minLength": 1},
    "bodySizeLimit": {"type": "string"},
}

_METADATA = {
    "type": "object", "additionalProperties": False, "required": ["name"],
    "properties": {"name": {"type": "string"}, "namespace": {"type": "string"},
                   "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                   "annotations": {"type": "object", "additionalProperties": {"type": "string"}}},
}


# PrometheusRule (prometheusrule_types.go): a rule is a recording rule or an alert, not both.
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_RULE = {"type": "object", "additionalProperties": False, "required": ["expr"],
         "properties": {"record": {"type": "string", "minLength": 1},
                        "alert": {"type": "string", "minLength": 1},
                        "expr": {"type": ["string", "integer"], "minLength": 1},
                        "for": _DURATION, "keep_firing_for": _DURATION,
                        "labels": _STRING_MAP, "annotations": _STRING_MAP},
         "oneOf": [{"required": ["record"], "not": {"required": ["alert"]}},
                   {"required": ["alert"], "not": {"required": ["record"]}}]}
_RULE_GROUP = {"type": "object", "additionalProperties": False, "required": ["name"],
               "properties": {"name": {"type": "string", "minLength": 1},
                              "labels": _STRING_MAP,
                              "interval": _DURATION, "query_offset": _DURATION,
                              "rules": {"type": "array", "items": _RULE},
                              "partial_response_strategy": {"type": "string",
                                                            "pattern": "(?i)^(abort|warn)?$"},
                              "limit": _UINT}}


def _document(kind, spec_properties, spec_required=("selector",)):
    return {
        "type": "object", "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "monitoring.coreos.com/v1"},
            "kind": {"const": kind},
            "metadata": _METADATA,
            "spec": {"type": "object", "additionalProperties": False,
                     "required": list(spec_required), "properties": spec_properties},
        },
    }


SCHEMAS = {
    "ServiceMonitor": _document("ServiceMonitor", dict(
        _SPEC_COMMON, targetLabels=_STRINGS,
        endpoints={"type": "array", "items": _SERVICE_ENDPOINT, "minItems": 1})),
    "PodMonitor": _document("PodMonitor", dict(
        _SPEC_COMMON,
        podMetricsEndpoints={"type": "array", "items": _POD_ENDPOINT, "minItems": 1})),
    "PrometheusRule": _document("PrometheusRule", {
        "groups": {"type": "array", "items": _RULE_GROUP, "minItems": 1}}, ("groups",)),
}


def errors(doc):
    """Every schema violation of one monitor document: "path: message"."""
    schema = SCHEMAS.get(doc.get("kind"))
    if schema is None:
        return [f"kind {doc.get('kind')!r} of {doc.get('apiVersion')} has no schema here "
                f"(known: {', '.join(SCHEMAS)})"]
    validator = jsonschema.Draft202012Validator(schema)
    out = []
    for e in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
        path = ".".join(str(p) for p in e.absolute_path) or "(document)"
        out.append(f"{path}: {e.message} (Prometheus Operator v1 schema, strict)")
    return out
