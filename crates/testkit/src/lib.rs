//! ringcap-testkit
