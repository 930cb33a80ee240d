"""Authentication and authorization of broker clients.

Providers turn credentials into a role (`AuthenticationProvider`: the token provider for JWTs, the
tls provider for client certificates, the basic provider for htpasswd users);
`AuthenticationService` holds the ones the broker config enables; `AuthorizationService` decides
what a role may do (super users, tenant admins, namespace and topic permissions);
`broker.protocol` applies both to the Pulsar protocol's connections and commands. `broker.auth`
also has the key and token helpers behind ``magnetar tokens``.
"""

from ._authz import ACTIONS as ACTIONS
from ._authz import AuthorizationError as AuthorizationError
from ._authz import AuthorizationService as AuthorizationService
from ._authz import check_actions as check_actions
from ._basic import BasicAuthenticationProvider as BasicAuthenticationProvider
from ._basic import apr1_hash as apr1_hash
from ._keys import create_token as create_token
from ._keys import load_private_key as load_private_key
from ._keys import load_public_key as load_public_key
from ._keys import new_key_pair as new_key_pair
from ._keys import new_secret_key as new_secret_key
from ._keys import read_key_bytes as read_key_bytes
from ._provider import AuthenticationError as AuthenticationError
from ._provider import AuthenticationProvider as AuthenticationProvider
from ._provider import Identity as Identity
from ._provider import PeerCert as PeerCert
from ._provider import TlsAuthenticationProvider as TlsAuthenticationProvider
from ._provider import TokenAuthenticationProvider as TokenAuthenticationProvider
from ._provider import certificate_common_name as certificate_common_name
from ._service import PROVIDER_ALIASES as PROVIDER_ALIASES
from ._service import AuthenticationService as AuthenticationService
from ._service import provider_method as provider_method

__all__ = [
    "ACTIONS",
    "PROVIDER_ALIASES",
    "AuthenticationError",
    "AuthenticationProvider",
    "AuthenticationService",
    "AuthorizationError",
    "AuthorizationService",
    "BasicAuthenticationProvider",
    "Identity",
    "PeerCert",
    "TlsAuthenticationProvider",
    "TokenAuthenticationProvider",
    "apr1_hash",
    "certificate_common_name",
    "check_actions",
    "create_token",
    "load_private_key",
    "load_public_key",
    "new_key_pair",
    "new_secret_key",
    "provider_method",
    "read_key_bytes",
]
