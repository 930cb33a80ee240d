"""Magnetar broker: the Apache Pulsar binary protocol over managed ledgers.

Start it with ``await nursery.start(serve_broker, BrokerService(factory, store, config), host, port)``;
the official ``pulsar-client`` then works against ``pulsar://host:port`` unchanged. The admin REST
API is `broker.admin.serve_admin`; metrics are in `broker.metrics`.
"""

from protocols.pulsar import InvalidTopicNameError as InvalidTopicNameError
from protocols.pulsar import NamespaceName as NamespaceName
from protocols.pulsar import TopicName as TopicName

from ._config import MESSAGE_SIZE_FRAME_PADDING as MESSAGE_SIZE_FRAME_PADDING
from ._config import BrokerConfig as BrokerConfig
from ._errors import BrokerServiceError as BrokerServiceError
from ._errors import ConsumerBusyError as ConsumerBusyError
from ._errors import IncompatibleSchemaError as IncompatibleSchemaError
from ._errors import NamespaceNotFoundError as NamespaceNotFoundError
from ._errors import NotAllowedError as NotAllowedError
from ._errors import ProducerBusyError as ProducerBusyError
from ._errors import ServiceNotReadyError as ServiceNotReadyError
from ._errors import TopicNotFoundError as TopicNotFoundError
from ._service import BrokerService as BrokerService
from .cluster._ownership import Ownership as Ownership
from .housekeeping._retention_hooks import StorePoliciesProvider as StorePoliciesProvider
from .housekeeping._retention_hooks import TopicPolicyStore as TopicPolicyStore
from .housekeeping._retention_hooks import publish_time_of as publish_time_of
from .protocol._server import serve_broker as serve_broker
from .resources._bundles import BundleRange as BundleRange
from .resources._clusters import ClusterResources as ClusterResources
from .resources._clusters import cluster_data as cluster_data
from .resources._namespaces import NamespaceResources as NamespaceResources
from .schema._registry import SchemaInfo as SchemaInfo
from .schema._registry import SchemaRegistry as SchemaRegistry
from .schema._registry import check_compatible as check_compatible
from .topics._selectors import AutoSplitRanges as AutoSplitRanges
from .topics._selectors import ConsumerKey as ConsumerKey
from .topics._selectors import RangeConflictError as RangeConflictError
from .topics._selectors import RoundRobin as RoundRobin
from .topics._selectors import StickyRanges as StickyRanges
from .topics._selectors import choose_active_consumer as choose_active_consumer

__all__ = [
    "MESSAGE_SIZE_FRAME_PADDING",
    "AutoSplitRanges",
    "BrokerConfig",
    "ClusterResources",
    "cluster_data",
    "BrokerService",
    "BrokerServiceError",
    "ConsumerBusyError",
    "ConsumerKey",
    "IncompatibleSchemaError",
    "InvalidTopicNameError",
    "NamespaceName",
    "NamespaceNotFoundError",
    "NamespaceResources",
    "NotAllowedError",
    "ProducerBusyError",
    "RangeConflictError",
    "RoundRobin",
    "SchemaInfo",
    "SchemaRegistry",
    "ServiceNotReadyError",
    "StickyRanges",
    "StorePoliciesProvider",
    "TopicName",
    "TopicNotFoundError",
    "TopicPolicyStore",
    "BundleRange",
    "Ownership",
    "check_compatible",
    "choose_active_consumer",
    "publish_time_of",
    "serve_broker",
]
