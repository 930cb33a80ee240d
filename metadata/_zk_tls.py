"""TLS to ZooKeeper, configured as ZooKeeper's own Java client is: with its client properties.

Pulsar points ``metadataStoreConfigPath`` at a ZooKeeper client configuration file (a properties
file that ZooKeeper's ``ZKClientConfig`` reads); BookKeeper's components take the same properties
as JVM system properties. Magnetar reads such a file: the broker's ``[cluster]``, the bookie's and
AutoRecovery's tables all take ``metadataStoreConfigPath``, and a file written for Pulsar works
unchanged. The properties used:

* ``zookeeper.client.secure``: ``true`` connects with TLS (to the server's ``secureClientPort``);
  anything else leaves the connection plain and the other properties unused.
* ``zookeeper.ssl.keyStore.location``: a PEM file holding this client's private key and its
  certificate chain, presented when the server asks (``ssl.clientAuth``); none when unset.
  ``zookeeper.ssl.keyStore.password``: the key's password when it is encrypted.
* ``zookeeper.ssl.trustStore.location``: PEM CA certificates the server's certificate must chain
  to; the system's CAs when unset.
* ``zookeeper.ssl.keyStore.type`` / ``zookeeper.ssl.trustStore.type``: ``PEM`` (or unset); the
  Java key stores (JKS, PKCS12) are refused with the property named.
* ``zookeeper.ssl.hostnameVerification``: ``true`` (ZooKeeper's default) checks that the server's
  certificate names the host in the URL.

Other properties (``zookeeper.clientCnxnSocket``, which the Java client needs for TLS; protocol
and cipher lists, which kazoo leaves to OpenSSL's defaults; timeouts; SASL) are ignored. The
server's certificate is always verified: there is no insecure mode.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from magnetar.common.config import ConfigError, read_properties

__all__ = ["ZkTls"]

_SECURE = "zookeeper.client.secure"
_KEYSTORE = "zookeeper.ssl.keyStore.location"
_KEYSTORE_PASSWORD = "zookeeper.ssl.keyStore.password"
_KEYSTORE_TYPE = "zookeeper.ssl.keyStore.type"
_TRUSTSTORE = "zookeeper.ssl.trustStore.location"
_TRUSTSTORE_TYPE = "zookeeper.ssl.trustStore.type"
_HOSTNAME = "zookeeper.ssl.hostnameVerification"


@dataclass(frozen=True)
class ZkTls:
    """TLS settings of a ZooKeeper session (see the module docstring); files are PEM."""

    keystore: str = ""  # private key and certificate chain of this client ("" = none)
    keystore_password: str = ""
    truststore: str = ""  # CA certificates ("" = the system's)
    hostname_verification: bool = True

    def __repr__(self) -> str:  # never print the password
        return (
            f"ZkTls(keystore={self.keystore!r}, truststore={self.truststore!r}, "
            f"hostname_verification={self.hostname_verification})"
        )

    @classmethod
    def from_properties(cls, props: dict[str, str], source: str) -> ZkTls | None:
        """The TLS settings of ZooKeeper client properties ``props`` read from ``source`` (None
        when ``zookeeper.client.secure`` is not ``true``). Raises `ConfigError` naming the
        property (and the file) for a store type other than PEM, a missing or unreadable file, or
        a key that does not load."""
        if props.get(_SECURE, "").strip().lower() != "true":
            return None
        for key in (_KEYSTORE_TYPE, _TRUSTSTORE_TYPE):
            kind = props.get(key, "").strip()
            if kind and kind.upper() != "PEM":
                raise ConfigError(key, f"{source}: only PEM files are supported, got {kind!r}")
        tls = cls(
            keystore=_readable(props.get(_KEYSTORE, "").strip(), _KEYSTORE, source),
            keystore_password=props.get(_KEYSTORE_PASSWORD, ""),
            truststore=_readable(props.get(_TRUSTSTORE, "").strip(), _TRUSTSTORE, source),
            hostname_verification=props.get(_HOSTNAME, "true").strip().lower() != "false",
        )
        tls.check(source)
        return tls

    @classmethod
    def from_config_file(cls, path: str, key: str = "metadataStoreConfigPath") -> ZkTls | None:
        """The TLS settings of the ZooKeeper client configuration file ``path`` ("" = none); a
        file that cannot be read raises `ConfigError` naming ``key``."""
        if not path:
            return None
        try:
            props = read_properties(path)
        except ConfigError as exc:
            raise ConfigError(key, exc.reason) from None
        return cls.from_properties(props, path)

    def check(self, source: str) -> None:
        """Load the files into an SSL context once, so that a bad key or CA file stops start-up
        (`ConfigError` naming the property) instead of every connection attempt."""
        ctx = ssl.create_default_context()
        if self.truststore:
            try:
                ctx.load_verify_locations(self.truststore)
            except (ssl.SSLError, OSError) as exc:
                raise ConfigError(
                    _TRUSTSTORE, f"{source}: {self.truststore!r} holds no usable CA certificate: {exc}"
                ) from None
        if self.keystore:
            try:
                ctx.load_cert_chain(self.keystore, self.keystore, self.keystore_password or None)
            except (ssl.SSLError, OSError) as exc:
                raise ConfigError(
                    _KEYSTORE, f"{source}: {self.keystore!r} must hold a private key and its certificate (PEM): {exc}"
                ) from None


def _readable(path: str, key: str, source: str) -> str:
    if path and not Path(path).is_file():
        raise ConfigError(key, f"{source}: file {path!r} does not exist or is not a file")
    return path
