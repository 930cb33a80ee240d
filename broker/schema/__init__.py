"""The schema registry (versions stored in the metadata store) and the compatibility checks it
applies, with Avro's schema resolution."""
