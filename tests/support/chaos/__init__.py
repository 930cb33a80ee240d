"""The chaos harness (tests/chaos runs a short cycle, bench/chaos.py long ones): a deployment of
real processes (`deploy`), producer processes and consumer threads (`producer`, `workload`), fault
scenarios (`scenarios`), a cycle that ends with a drain and a check (`run`), the invariants
themselves (`checker`), the look at what storage holds (`audit`) and the test hosts that network
faults separate (`netns`)."""
