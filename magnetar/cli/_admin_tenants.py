"""``magnetar admin tenants``."""

from __future__ import annotations

import click

from ._admin_api import AdminApi, admin_command
from ._help import HelpGroup

tenants = HelpGroup("tenants", help="Tenants.")

__all__ = ["tenants"]

TENANT_ARG = click.argument("tenant")


@admin_command(tenants, "list")
def tenants_list(api: AdminApi) -> None:
    """List tenants."""
    api.show("/admin/v2/tenants", columns=["tenant"])


@admin_command(tenants, "get", TENANT_ARG)
def tenants_get(api: AdminApi, tenant: str) -> None:
    """Show a tenant's admin roles and allowed clusters."""
    api.show(f"/admin/v2/tenants/{tenant}", title=tenant)


@admin_command(
    tenants,
    "create",
    TENANT_ARG,
    click.option("--admin-roles", "-r", default="", help="Comma-separated admin roles."),
    click.option("--allowed-clusters", "-c", default="", help="Comma-separated clusters (default: this one)."),
)
def tenants_create(api: AdminApi, tenant: str, admin_roles: str, allowed_clusters: str) -> None:
    """Create a tenant."""
    body = {
        "adminRoles": [r for r in admin_roles.split(",") if r],
        "allowedClusters": [c for c in allowed_clusters.split(",") if c],
    }
    api.do("PUT", f"/admin/v2/tenants/{tenant}", f"created tenant {tenant}", body)


@admin_command(tenants, "delete", TENANT_ARG)
def tenants_delete(api: AdminApi, tenant: str) -> None:
    """Delete a tenant (it must have no namespaces)."""
    api.do("DELETE", f"/admin/v2/tenants/{tenant}", f"deleted tenant {tenant}")
