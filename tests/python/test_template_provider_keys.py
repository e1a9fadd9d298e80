"""template.yaml's provider-key rules (issue #27 item 5): no provider key in any function's
environment; the keys are SSM parameters under the `ProviderKeyParameterPrefix` path, which exactly
the functions that call providers (inference, worker, poller) may `ssm:GetParameter`, and nothing
else of Parameter Store; each of them is told the prefix (the code refuses a configured parameter
outside it at start-up). Checked on the template as written and as SAM expands it.
"""

from __future__ import annotations

import re
from typing import Any

from test_hardening_template import FUNCTIONS, SHARED_SRC, actions_of, as_list, expanded, role_statements, template

# The functions that call providers: the APIs, the worker (batch lines, async requests,
# provider-native batch steps) and the poller (it polls provider-native batches).
PROVIDER_CALLERS = {"NimbusInferenceFunction", "NimbusWorkerFunction", "NimbusPollerFunction"}
PREFIX_PARAMETER = "ProviderKeyParameterPrefix"
PREFIX_ENV = "NIMBUS_PROVIDER_KEY_PREFIX"
PARAMETER_ARN = "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter${ProviderKeyParameterPrefix}*"
# Names of variables that would carry a secret (a key id such as NIMBUS_SEALING_KEY_ID is no secret).
SECRET_NAME = re.compile(r"(API_?KEY|SECRET|TOKEN|PASSWORD)", re.IGNORECASE)


def environments(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each function's environment variables, the Globals' included."""
    shared = doc.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables", {})
    return {
        function: {**shared, **(doc["Resources"][function]["Properties"].get("Environment") or {}).get("Variables", {})}
        for function in FUNCTIONS
    }


def refs_in(value: Any) -> set[str]:
    """Every parameter or resource a value refers to (`Ref` and `${Name}` in `Fn::Sub`)."""
    if isinstance(value, dict):
        found = {value["Ref"]} if "Ref" in value else set()
        if "Fn::Sub" in value:
            text = value["Fn::Sub"] if isinstance(value["Fn::Sub"], str) else value["Fn::Sub"][0]
            found |= set(re.findall(r"\$\{([A-Za-z0-9]+)\}", text))
        return found | {r for v in value.values() for r in refs_in(v)}
    if isinstance(value, list):
        return {r for v in value for r in refs_in(v)}
    return set()


def test_no_function_environment_holds_a_provider_key() -> None:
    doc = template()
    secret_parameters = {
        name
        for name, parameter in doc["Parameters"].items()
        if parameter.get("NoEcho") or SECRET_NAME.search(name)
    }
    assert not secret_parameters, "a secret passed as a stack parameter ends up in plain sight"
    for function, variables in environments(doc).items():
        for name, value in variables.items():
            assert not SECRET_NAME.search(name), (function, name)
            assert not refs_in(value) & secret_parameters, (function, name)
        assert "OPENAI_API_KEY" not in variables, function


def test_only_the_functions_that_call_providers_may_read_keys_and_only_under_the_prefix() -> None:
    doc = expanded()
    for function in FUNCTIONS:
        # The sealing data key's own parameter (test_idle_cost_template.py) is not a provider key.
        # Denials aside (the inference role's own, test_idle_cost_template.py).
        statements = [
            s
            for s in role_statements(doc, f"{function}Role")
            if s.get("Sid") != "SealingKeyParameter" and s.get("Effect", "Allow") == "Allow"
        ]
        ssm = [s for s in statements if any(a.lower().startswith("ssm:") for a in as_list(s["Action"]))]
        if function not in PROVIDER_CALLERS:
            assert not ssm, function
            continue
        assert len(ssm) == 1, (function, ssm)
        (statement,) = ssm
        assert statement["Effect"] == "Allow"
        assert as_list(statement["Action"]) == ["ssm:GetParameter"], function
        assert as_list(statement["Resource"]) == [{"Fn::Sub": PARAMETER_ARN}], function
        # No other way into Parameter Store or Secrets Manager, and no blanket KMS decrypt.
        others = actions_of([s for s in statements if s is not statement])
        assert not {a for a in others if a.lower().startswith(("ssm:", "secretsmanager:"))}, function


def test_the_prefix_is_a_path_and_each_reader_is_told_it() -> None:
    doc = template()
    parameter = doc["Parameters"][PREFIX_PARAMETER]
    assert parameter["Default"] == "/nimbus/"
    pattern = re.compile(parameter["AllowedPattern"])
    for good in ["/nimbus/", "/nimbus/prod/", "/team_a/nimbus-1.2/"]:
        assert pattern.fullmatch(good), good
    # Never the whole store, nor a name prefix that is not a folder.
    for bad in ["/", "", "nimbus/", "/nimbus", "/nim*/", "/nimbus//", "/a b/"]:
        assert not pattern.fullmatch(bad), bad
    for function, variables in environments(doc).items():
        if function in PROVIDER_CALLERS:
            assert variables.get(PREFIX_ENV) == {"Ref": PREFIX_PARAMETER}, function
        else:
            assert PREFIX_ENV not in variables, function
    # The variable the code reads.
    assert f'"{PREFIX_ENV}"' in (SHARED_SRC / "app" / "lambda.rs").read_text()
