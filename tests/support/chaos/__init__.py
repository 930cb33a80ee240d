"""The chaos harness (tests/chaos runs a short cycle, bench/chaos.py long ones): a deployment of
real processes (`deploy`), producer processes and consumer threads (`producer`, `workload`), fault
scenarios (`scenarios`), a cycle that ends with a drain and a check (`run`) and the invariants
themselves (`checker`)."""
