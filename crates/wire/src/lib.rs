//! ringcap-wire
