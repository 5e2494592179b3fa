//! ringcap-source
