"""dsh-contract-tests: the provider contract kit.

Subclass :class:`ProviderContract` in your own test module, override its
``provider_factory`` fixture, and run pytest; see the README.
"""

from dsh_contract_tests.contract import (
    ContractHarness,
    CredentialedProviderContract,
    ProviderContract,
    check_no_silent_opt_out,
)
from dsh_contract_tests.driver import LifecycleEvent, ServiceDriver, SpyProvider
from dsh_contract_tests.failures import ContractViolation, SilentOptOut, requirement
from dsh_contract_tests.manifest import REQUIREMENTS, Requirement
from dsh_contract_tests.processes import ProcessWatch
from dsh_contract_tests.routes import (
    LoopbackDirectiveRoute,
    MessagesDirectiveRoute,
    ResponsesDirectiveRoute,
)
from dsh_contract_tests.scenario import (
    DIRECTIVE_PREFIX,
    ENV_ERROR_TEXT,
    ENV_READY_DIR,
    ENV_STDERR_TEXT,
    Behaviour,
    ChildSetup,
    Directive,
    PlantedSecrets,
    ProductHome,
    ProviderFactory,
    find_directive,
    find_directives,
    new_token,
    recalled_token,
)

__all__ = [
    "DIRECTIVE_PREFIX",
    "ENV_ERROR_TEXT",
    "ENV_READY_DIR",
    "ENV_STDERR_TEXT",
    "REQUIREMENTS",
    "Behaviour",
    "ChildSetup",
    "ContractHarness",
    "ContractViolation",
    "CredentialedProviderContract",
    "Directive",
    "LifecycleEvent",
    "LoopbackDirectiveRoute",
    "MessagesDirectiveRoute",
    "PlantedSecrets",
    "ProcessWatch",
    "ProductHome",
    "ProviderContract",
    "ProviderFactory",
    "Requirement",
    "ResponsesDirectiveRoute",
    "ServiceDriver",
    "SilentOptOut",
    "SpyProvider",
    "check_no_silent_opt_out",
    "find_directive",
    "find_directives",
    "new_token",
    "recalled_token",
    "requirement",
]
