"""``supervisorctl``: the client of the daemon's control socket (main, common, render, wait, ops) and the
offline commands that need no daemon (offline)."""
