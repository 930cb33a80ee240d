"""The bookie server: the core that gives ledgers their semantics over the journal and the ledger
storage, and everything that makes it a process.

* ``_bookie``: `Bookie` (adds, reads, fencing, LAC, read-only states, checkpoints) and
  `open_bookie`, which replays the journal and runs the journal, storage and GC loops;
  ``_lac``: per-ledger LAC tracking and long polls.
* ``_server``: the bookie protocol server (`serve_bookie`), a thin trio loop per connection over
  the sans-IO codec of ``protocols.bookkeeper``; ``_http``: metrics and the REST API.
* ``_authz``: BookKeeper's certificate-role authorization (``BookieAuthZFactory``,
  ``authorizedRoles``) of TLS clients.
* ``_registration``, ``_cookies``: the bookie's entries in the metadata store; ``_disks``: the
  disk checker; ``_config``: `BookieConfig`; ``_process``: all of it in one nursery
  (`serve_bookie_process`, what ``magnetar bookie`` runs).

The top of the bookie's layers: it composes `bookie.journal`, `bookie.storage` and `bookie.gc`,
and nothing below imports it.
"""

from ._authz import BOOKIE_AUTHZ_FACTORY as BOOKIE_AUTHZ_FACTORY
from ._authz import CertificateRoleAuthorizer as CertificateRoleAuthorizer
from ._authz import certificate_roles as certificate_roles
from ._bookie import KILL_AT_ENV as KILL_AT_ENV
from ._bookie import AddTicket as AddTicket
from ._bookie import Bookie as Bookie
from ._bookie import BookieState as BookieState
from ._bookie import BookieStatistics as BookieStatistics
from ._bookie import ReadOnlyReason as ReadOnlyReason
from ._bookie import open_bookie as open_bookie
from ._config import BookieConfig as BookieConfig
from ._cookies import COOKIE_FILE as COOKIE_FILE
from ._cookies import CookieMismatchError as CookieMismatchError
from ._cookies import check_cookies as check_cookies
from ._cookies import check_ledger_layout as check_ledger_layout
from ._cookies import expected_cookie as expected_cookie
from ._cookies import format_bookie as format_bookie
from ._disks import DiskVerdict as DiskVerdict
from ._disks import classify as classify
from ._disks import measure_usage as measure_usage
from ._disks import run_disk_checker as run_disk_checker
from ._http import bookie_http_app as bookie_http_app
from ._http import serve_bookie_http as serve_bookie_http
from ._lac import TooManyWaiters as TooManyWaiters
from ._process import BookieEndpoints as BookieEndpoints
from ._process import BookieFatalError as BookieFatalError
from ._process import serve_bookie_process as serve_bookie_process
from ._registration import registration_path as registration_path
from ._registration import run_registration as run_registration
from ._server import LocalConnection as LocalConnection
from ._server import serve_bookie as serve_bookie

__all__ = [
    # the core
    "Bookie",
    "BookieState",
    "ReadOnlyReason",
    "BookieStatistics",
    "AddTicket",
    "open_bookie",
    "KILL_AT_ENV",
    "TooManyWaiters",
    # servers and the process
    "serve_bookie",
    "LocalConnection",
    "bookie_http_app",
    "serve_bookie_http",
    "serve_bookie_process",
    "BookieEndpoints",
    "BookieFatalError",
    "BookieConfig",
    # TLS client authorization
    "BOOKIE_AUTHZ_FACTORY",
    "CertificateRoleAuthorizer",
    "certificate_roles",
    # metadata store and disks
    "run_registration",
    "registration_path",
    "COOKIE_FILE",
    "CookieMismatchError",
    "check_cookies",
    "check_ledger_layout",
    "expected_cookie",
    "format_bookie",
    "DiskVerdict",
    "classify",
    "measure_usage",
    "run_disk_checker",
]
