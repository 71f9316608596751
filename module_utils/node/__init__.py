"""One node: its Ray, its shared root, its code snapshots, and the doctor's checks of it (over base/ and daemons/).

  probe.py            what a node has: the interface to an address, its GPUs, a program on Ray's PATH
  ray_ctl.py          start, inspect and stop one node's Ray processes (library/ray_node.py's steps)
  ray_run.py          library/ray_node.py's run: from its parameters to its result
  shared_root_ctl.py  mount, verify, lay out and mark the shared root (library/shared_root.py's steps)
  shared_root_run.py  library/shared_root.py's run, also taken by ray_node on a worker
  code_snapshot.py    which code a source holds (a commit or a content hash), for a snapshot on the shared root
  doctor.py           doctor.yml's judgement: every node's facts side by side, each node, check and fix that is wrong
"""
