//! The nemesis harness's parts (see tests/nemesis.rs): TCP proxies that
//! cut links, a three-member etcd, the members wired through the proxies,
//! the clients and their history, and the checker.

#![allow(dead_code)]

pub mod check;
pub mod etcd3;
pub mod load;
pub mod members;
pub mod proxy;
