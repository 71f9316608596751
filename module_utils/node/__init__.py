"""One node: its Ray, its shared root, its code snapshots, and the doctor's checks of it (over base/ and daemons/).

  probe.py            what a node has: the interface to an address, its GPUs, a program on Ray's PATH
  ray_node.py         start, inspect and stop one node's Ray processes: library/ray_node.py's steps and its run,
                      from its parameters to its result
  shared_root.py      mount, verify, lay out and mark the shared root: library/shared_root.py's steps and its run,
                      also taken by ray_node on a worker
  code_snapshot.py    which code a source holds (a commit or a content hash), for a snapshot on the shared root
  doctor.py           doctor.yml's judgement: every node's facts side by side, each node, check and fix that is wrong
"""
