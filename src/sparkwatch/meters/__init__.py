"""Wall, BMC and PDU meters the coordinator polls itself: a node's ``wall`` domain when its board has no
system sensor, or one it cannot trust (docs/power-domains.md, *Wall meters*)."""
