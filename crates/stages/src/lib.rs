//! ringcap-stages
