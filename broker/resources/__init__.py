"""What the broker keeps in the metadata store about namespaces (policies, partitioned topics),
clusters, and the bundles that cut a namespace's hash space."""
