"""The performance sentinel, pure: a per-config baseline of decode speed and its decay (docs/sentinel.md)."""
