//! What a coordinator knows of the cluster right now, in memory: every
//! database's shard map and the live members with the URLs they are
//! reached at. Requests read it without asking etcd; the shard keeper and
//! the member watcher ([`crate::coordinator`]) keep it current from
//! etcd's watches.
//!
//! A node may be told to reach some members at another URL than the one
//! they advertise (`--peer-url NAME=URL`: a proxy, an address of another
//! network); the view applies those routes as members are recorded, so
//! every request to a member uses them.
//!
//! Invariants: a map is replaced whole (readers hold an `Arc` of the one
//! they read, never a half-updated one); a member is in `live` only while
//! etcd lists its key (its lease is alive), so requests skip a node at
//! once when etcd says it is down; a member with a route is always
//! recorded with the route's URL.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use crate::layout::ShardMap;
use crate::membership::NodeInfo;

/// The maps and live members a coordinator routes by.
#[derive(Debug, Default)]
pub struct ClusterView {
    maps: RwLock<HashMap<String, Arc<ShardMap>>>,
    live: RwLock<BTreeMap<String, NodeInfo>>,
    routes: BTreeMap<String, String>,
}

impl ClusterView {
    /// A view that reaches the members named in `routes` at the URL given
    /// there instead of the one they advertise.
    pub fn with_routes(routes: BTreeMap<String, String>) -> ClusterView {
        ClusterView {
            routes,
            ..ClusterView::default()
        }
    }

    fn routed(&self, mut info: NodeInfo) -> NodeInfo {
        if let Some(url) = self.routes.get(&info.name) {
            info.advertise.clone_from(url);
        }
        info
    }

    /// The map of database `db`, if the view has one.
    pub fn map(&self, db: &str) -> Option<Arc<ShardMap>> {
        read(&self.maps).get(db).cloned()
    }

    /// Every database with a map, sorted.
    pub fn dbs(&self) -> Vec<String> {
        let mut names: Vec<String> = read(&self.maps).keys().cloned().collect();
        names.sort();
        names
    }

    /// Stores (or replaces) a database's map.
    pub fn put_map(&self, map: ShardMap) {
        write(&self.maps).insert(map.db.clone(), Arc::new(map));
    }

    /// Forgets a database's map.
    pub fn remove_map(&self, db: &str) {
        write(&self.maps).remove(db);
    }

    /// Replaces every map at once (after listing them).
    pub fn set_maps(&self, maps: impl IntoIterator<Item = ShardMap>) {
        let all = maps
            .into_iter()
            .map(|m| (m.db.clone(), Arc::new(m)))
            .collect();
        *write(&self.maps) = all;
    }

    /// A live member by name.
    pub fn member(&self, name: &str) -> Option<NodeInfo> {
        read(&self.live).get(name).cloned()
    }

    /// The live members, by name.
    pub fn live(&self) -> BTreeMap<String, NodeInfo> {
        read(&self.live).clone()
    }

    /// Replaces the live members.
    pub fn set_live(&self, members: BTreeMap<String, NodeInfo>) {
        let members = members
            .into_iter()
            .map(|(name, info)| (name, self.routed(info)))
            .collect();
        *write(&self.live) = members;
    }

    /// Records a member that joined (or changed its URL).
    pub fn joined(&self, info: NodeInfo) {
        let info = self.routed(info);
        write(&self.live).insert(info.name.clone(), info);
    }

    /// Records a member that left.
    pub fn left(&self, name: &str) {
        write(&self.live).remove(name);
    }
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_and_members() {
        let v = ClusterView::default();
        let nodes = vec!["a".to_string(), "b".to_string()];
        v.put_map(ShardMap::new("db", 2, 2, &nodes, 1, false).unwrap());
        assert_eq!(v.map("db").unwrap().q(), 2);
        assert_eq!(v.dbs(), ["db"]);
        v.remove_map("db");
        assert!(v.map("db").is_none());
        v.joined(NodeInfo {
            name: "a".into(),
            advertise: "http://127.0.0.1:1".into(),
        });
        assert!(v.member("a").is_some());
        v.left("a");
        assert!(v.live().is_empty());
    }

    #[test]
    fn routes_replace_the_advertised_url() {
        let routes = BTreeMap::from([("b".to_string(), "http://127.0.0.1:9".to_string())]);
        let v = ClusterView::with_routes(routes);
        let info = |name: &str| NodeInfo {
            name: name.into(),
            advertise: format!("http://{name}.example:1"),
        };
        v.set_live(BTreeMap::from([
            ("a".into(), info("a")),
            ("b".into(), info("b")),
        ]));
        assert_eq!(v.member("a").unwrap().advertise, "http://a.example:1");
        assert_eq!(v.member("b").unwrap().advertise, "http://127.0.0.1:9");
        v.left("b");
        v.joined(info("b"));
        assert_eq!(v.member("b").unwrap().advertise, "http://127.0.0.1:9");
    }
}
