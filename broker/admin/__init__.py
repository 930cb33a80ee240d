"""Magnetar's admin REST API: Pulsar's v2 admin paths and JSON shapes over a `BrokerService`.

Serve it next to the protocol server::

    port = await nursery.start(serve_broker, service, host, 6650)
    http = await nursery.start(serve_admin, service, host, 8080)

Errors are ``{"reason": "..."}`` with Pulsar's status codes; ``/metrics`` is the Prometheus text
of the broker, its managed ledgers and retention.
"""

from ..housekeeping._gc_join import BookieAnswer as BookieAnswer
from ..housekeeping._gc_join import TrimmedLedger as TrimmedLedger
from ..housekeeping._gc_join import join_gc_explain as join_gc_explain
from ..housekeeping._gc_view import BookieGcView as BookieGcView
from ..housekeeping._gc_view import TrimHistory as TrimHistory
from ..housekeeping._trim_store import TRIM_HISTORY_PATH as TRIM_HISTORY_PATH
from ..housekeeping._trim_store import TrimHistoryStore as TrimHistoryStore
from ._app import create_admin_app as create_admin_app
from ._app import serve_admin as serve_admin
from ._auth import Access as Access
from ._auth import required_access as required_access
from ._explain import GcExplainHook as GcExplainHook
from ._explain import explain_storage as explain_storage
from ._subscriptions import parse_message_id as parse_message_id

__all__ = [
    "Access",
    "BookieAnswer",
    "BookieGcView",
    "GcExplainHook",
    "TRIM_HISTORY_PATH",
    "TrimHistory",
    "TrimHistoryStore",
    "TrimmedLedger",
    "create_admin_app",
    "explain_storage",
    "join_gc_explain",
    "parse_message_id",
    "required_access",
    "serve_admin",
]
