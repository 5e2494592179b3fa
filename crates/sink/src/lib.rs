//! ringcap-sink
