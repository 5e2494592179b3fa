"""ringcap benchmark harness (stdlib only); bench/run is the entry point.

    common    constants (paths, CPUs, IMIX) and small helpers (/proc readers)
    presets   --tiny / --quick / --full
    tools     the capture tools under test and independent record counters
    testbed   namespaces, veth, trafgen, interface counters, cgroup quotas
    measure   one measurement of one tool, and process groups (daemon, clients)
    phases/   one file per phase, each a mixin of Bench with a phase_* method
    pcapgen   synthetic input files for the offline phases
    bench     Bench: all of the above, and the order the phases run in
    report    the tables printed at the end (and by --report)
    cli       the command line

A new phase: a file in phases/ with a mixin class and its phase_NAME method,
the class added to Bench's bases, a call (and a --skip-NAME flag) in
Bench.run / cli.main, its table in report.py.
"""
