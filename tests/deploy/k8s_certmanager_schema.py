"""A strict JSON schema of cert-manager's Certificate and Issuer (cert-manager.io/v1), which
kubernetes-validate does not bundle. The allowed keys are the JSON names of CertificateSpec,
CertificatePrivateKey, X509Subject, IssuerSpec (IssuerConfig), CAIssuer and SelfSignedIssuer in
cert-manager pkg/apis/certmanager/v1 (types_certificate.go, types_issuer.go) and ObjectReference
of pkg/apis/meta/v1; every object sift's manifests use is closed (additionalProperties: false),
so a typo is an error. The ACME, Vault and Venafi issuer configurations, keystores and the
name constraints are only type-checked (objects), since sift's component uses none.
"""

import jsonschema

_DURATION = {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"}
_STRINGS = {"type": "array", "items": {"type": "string"}}
_OBJ = {"type": "object"}
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}

# KeyUsage (types.go): the values cert-manager accepts in spec.usages.
USAGES = ["signing", "digital signature", "content commitment", "key encipherment",
          "key agreement", "data encipherment", "cert sign", "crl sign", "encipher only",
          "decipher only", "any", "server auth", "client auth", "code signing", "email protection",
          "s/mime", "ipsec end system", "ipsec tunnel", "ipsec user", "timestamping",
          "ocsp signing", "microsoft sgc", "netscape sgc"]

_ISSUER_REF = {"type": "object", "additionalProperties": False, "required": ["name"],
               "properties": {"name": {"type": "string", "minLength": 1},
                              "kind": {"type": "string"}, "group": {"type": "string"}}}
_PRIVATE_KEY = {"type": "object", "additionalProperties": False,
                "properties": {"rotationPolicy": {"enum": ["Never", "Always"]},
                               "encoding": {"enum": ["PKCS1", "PKCS8"]},
                               "algorithm": {"enum": ["RSA", "ECDSA", "Ed25519"]},
                               "size": {"type": "integer", "minimum": 0}}}
_SUBJECT = {"type": "object", "additionalProperties": False,
            "properties": {k: _STRINGS for k in (
                "organizations", "countries", "organizationalUnits", "localities", "provinces",
                "streetAddresses", "postalCodes")} | {"serialNumber": {"type": "string"}}}
_SECRET_TEMPLATE = {"type": "object", "additionalProperties": False,
                    "properties": {"annotations": _STRING_MAP, "labels": _STRING_MAP}}
_CERTIFICATE_SPEC = {
    "type": "object", "additionalProperties": False, "required": ["secretName", "issuerRef"],
    "properties": {
        "subject": _SUBJECT,
        "literalSubject": {"type": "string"},
        "commonName": {"type": "string", "maxLength": 64},
        "duration": _DURATION,
        "renewBefore": _DURATION,
        "renewBeforePercentage": {"type": "integer", "minimum": 1, "maximum": 99},
        "dnsNames": _STRINGS,
        "ipAddresses": _STRINGS,
        "uris": _STRINGS,
        "otherNames": {"type": "array", "items": _OBJ},
        "emailAddresses": _STRINGS,
        "secretName": {"type": "string", "minLength": 1},
        "secretTemplate": _SECRET_TEMPLATE,
        "keystores": _OBJ,
        "issuerRef": _ISSUER_REF,
        "isCA": {"type": "boolean"},
        "usages": {"type": "array", "items": {"enum": USAGES}},
        "privateKey": _PRIVATE_KEY,
        "signatureAlgorithm": {"type": "string"},
        "encodeUsagesInRequest": {"type": "boolean"},
        "revisionHistoryLimit": {"type": "integer", "minimum": 1},
        "additionalOutputFormats": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["type"],
            "properties": {"type": {"enum": ["DER", "CombinedPEM"]}}}},
        "nameConstraints": _OBJ,
    },
}
_ISSUER_SPEC = {
    "type": "object", "additionalProperties": False,
    "minProperties": 1, "maxProperties": 1,  # exactly one issuer type
    "properties": {
        "acme": _OBJ,
        "ca": {"type": "object", "additionalProperties": False, "required": ["secretName"],
               "properties": {"secretName": {"type": "string", "minLength": 1},
                              "crlDistributionPoints": _STRINGS,
                              "ocspServers": _STRINGS,
                              "issuingCertificateURLs": _STRINGS}},
        "vault": _OBJ,
        "selfSigned": {"type": "object", "additionalProperties": False,
                       "properties": {"crlDistributionPoints": _STRINGS}},
        "venafi": _OBJ,
    },
}

_METADATA = {
    "type": "object", "additionalProperties": False, "required": ["name"],
    "properties": {"name": {"type": "string"}, "namespace": {"type": "string"},
                   "labels": _STRING_MAP, "annotations": _STRING_MAP},
}


def _document(kind, spec):
    return {
        "type": "object", "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {"apiVersion": {"const": "cert-manager.io/v1"}, "kind": {"const": kind},
                       "metadata": _METADATA, "spec": spec},
    }


SCHEMAS = {
    "Certificate": _document("Certificate", _CERTIFICATE_SPEC),
    "Issuer": _document("Issuer", _ISSUER_SPEC),
    "ClusterIssuer": _document("ClusterIssuer", _ISSUER_SPEC),
}


def errors(doc):
    """Every schema violation of one cert-manager document: "path: message"."""
    schema = SCHEMAS.get(doc.get("kind"))
    if schema is None:
        return [f"kind {doc.get('kind')!r} of {doc.get('apiVersion')} has no schema here "
                f"(known: {', '.join(SCHEMAS)})"]
    validator = jsonschema.Draft202012Validator(schema)
    out = []
    for e in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
        path = ".".join(str(p) for p in e.absolute_path) or "(document)"
        out.append(f"{path}: {e.message} (cert-manager v1 schema, strict)")
    if doc.get("kind") == "Certificate":
        spec = doc.get("spec") or {}
        if not any(spec.get(k) for k in ("commonName", "literalSubject", "dnsNames", "uris",
                                          "emailAddresses", "ipAddresses", "otherNames")):
            out.append("spec: at least one of commonName, dnsNames, uris, emailAddresses, "
                       "ipAddresses or otherNames must be set (cert-manager's webhook rejects it)")
    return out
