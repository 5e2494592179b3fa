//! ringcap-stats
