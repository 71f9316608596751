"""One node: its Ray, its shared root, its code snapshots, and the doctor's checks of it (over base/ and daemons/)."""
