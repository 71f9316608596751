"""Long-running services the roles start (Redis, Prometheus, TensorBoard) and the GCS store (over base/).

  ctl.py          one daemon brought to its state in one call of library/ray_daemon.py: a systemd unit, else
                  start-stop-daemon, restarted when its command or files changed
  files.py        a daemon's directories and files, written as root without following a symbolic link
  redis_store.py  a minimal Redis client that checks the store Ray's GCS fault tolerance keeps the head's tables in
"""
