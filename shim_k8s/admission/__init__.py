"""shim_k8s.admission: YuniKorn's admission controller (`ykshm admission`), the HTTPS webhook that
stamps the submitting user on pods and workloads, routes pods to the scheduler and checks the
yunikorn ConfigMaps. YuniKorn's names, rules, messages and defaults
(../shared/research/yunikorn-deploy.md §1).

    main        `ykshm admission` command line: flags, namespace, the trio main
    conf        the `admissionController.*` keys (and service.policyGroup / hot refresh), defaults
    request     AdmissionReview v1 decoding as Go decodes it; the answer with its JSONPatch
    usergroup   user.info written and checked: trusted submitters, Go's JSON errors
    namespaces  filtering: processNamespaces/bypassNamespaces, labelNamespaces/noLabelNamespaces,
                the namespace annotations that override them
    mutate      /mutate decisions: pods (schedulerName, app IDs, queue label, allow-preemption,
                user.info), workloads' pod templates, UPDATE of user.info denied
    validate    /validate-conf: the yunikorn ConfigMaps through the scheduler's validate-conf
    review      the ASGI app: /health, body and Content-Type checks, dispatch, never a 500
    caches      namespaces, PriorityClasses and ConfigMaps as the informers keep them
    informers   the three informers feeding the caches
    certs       CAs and the serving certificate (cryptography), expiry rules
    webhooks    the CA pair in the Secret, the Mutating/ValidatingWebhookConfigurations
    tls         the swappable serving context, refresh and rotation (CertManager)
"""
