//! Per-database security objects (`GET`/`PUT /{db}/_security`): parsing
//! and validating them as CouchDB 3.4 does, and deciding who is a database
//! member or admin.
//!
//! Rules (CouchDB 3.4.3's `couch_db`):
//! - The body must be a JSON object. `admins` and `members` (absent:
//!   `members` falls back to the legacy `readers`, then to `{}`) must be
//!   objects whose `names` and `roles` (absent: `[]`) are arrays of
//!   strings. Every other member, at any level, is kept and returned as
//!   stored.
//! - A db admin is a server admin (`_admin` role), a user named in
//!   `admins.names`, or one with a role in `admins.roles`.
//! - A member is a db admin, anyone at all when `members` has neither
//!   names nor roles (a *public* database), a user named in
//!   `members.names`, or one with a role in `members.roles`. Anonymous
//!   requesters match no name.
//!
//! Invariant: a [`SecurityObject`] only exists for a valid object, and
//! [`SecurityObject::as_json`] is exactly the JSON it was parsed from.

use serde_json::{json, Value};

use crate::{AuthError, UserCtx, ADMIN_ROLE};

/// Why a security object was refused. The `Display` texts are CouchDB's
/// internal reasons; over HTTP, CouchDB 3.4.3 (clustered) answers every one
/// of them with `500 {"error":"error","reason":"no_majority"}` (recorded
/// from the reference server), which is what [`SecurityError::to_couchdb`]
/// gives.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecurityError {
    #[error("security object must be a JSON object")]
    NotAnObject,
    #[error("admins or members must be a JSON list of strings")]
    SectionNotAnObject,
    #[error("names must be a JSON list of strings")]
    Names,
    #[error("roles must be a JSON list of strings")]
    Roles,
}

impl SecurityError {
    /// What CouchDB 3.4.3 answers over HTTP for any invalid object.
    pub fn to_couchdb(&self) -> AuthError {
        AuthError::Internal {
            error: "error".to_string(),
            reason: "no_majority".to_string(),
        }
    }
}

impl From<SecurityError> for AuthError {
    fn from(e: SecurityError) -> AuthError {
        e.to_couchdb()
    }
}

/// `admins` or `members`: who, by name or by role.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Section {
    pub names: Vec<String>,
    pub roles: Vec<String>,
}

impl Section {
    fn parse(value: Option<&Value>) -> Result<Section, SecurityError> {
        let Some(value) = value else {
            return Ok(Section::default());
        };
        let obj = value.as_object().ok_or(SecurityError::SectionNotAnObject)?;
        Ok(Section {
            names: strings(obj.get("names"), SecurityError::Names)?,
            roles: strings(obj.get("roles"), SecurityError::Roles)?,
        })
    }

    /// Whether neither names nor roles are listed.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty() && self.roles.is_empty()
    }

    /// Whether `user` is named here or has a role listed here (or is a
    /// server admin: `_admin` always counts as listed, as in CouchDB).
    pub fn matches(&self, user: &UserCtx) -> bool {
        user.roles
            .iter()
            .any(|r| r == ADMIN_ROLE || self.roles.contains(r))
            || user.name.as_ref().is_some_and(|n| self.names.contains(n))
    }
}

fn strings(value: Option<&Value>, err: SecurityError) -> Result<Vec<String>, SecurityError> {
    match value {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_string).ok_or(err.clone()))
            .collect(),
        Some(_) => Err(err),
    }
}

/// A database's security object.
#[derive(Debug, Clone, PartialEq)]
pub struct SecurityObject {
    pub admins: Section,
    pub members: Section,
    raw: Value,
}

impl Default for SecurityObject {
    /// `{}`: no db admins but server admins, everyone a member.
    fn default() -> SecurityObject {
        SecurityObject {
            admins: Section::default(),
            members: Section::default(),
            raw: json!({}),
        }
    }
}

impl SecurityObject {
    /// Validates a `PUT /{db}/_security` body (see the module doc).
    pub fn parse(value: &Value) -> Result<SecurityObject, SecurityError> {
        let obj = value.as_object().ok_or(SecurityError::NotAnObject)?;
        let admins = Section::parse(obj.get("admins"))?;
        let members = Section::parse(obj.get("members").or_else(|| obj.get("readers")))?;
        Ok(SecurityObject {
            admins,
            members,
            raw: value.clone(),
        })
    }

    /// The object CouchDB 3 gives a new database with `[couchdb]
    /// default_security = admin_only` (its default), and `_users`:
    /// `{"members":{"roles":["_admin"]},"admins":{"roles":["_admin"]}}`.
    pub fn admin_only() -> SecurityObject {
        let raw = json!({"members": {"roles": [ADMIN_ROLE]}, "admins": {"roles": [ADMIN_ROLE]}});
        SecurityObject::parse(&raw).expect("valid")
    }

    /// The object as stored (extra members included).
    pub fn as_json(&self) -> &Value {
        &self.raw
    }

    pub fn into_json(self) -> Value {
        self.raw
    }

    /// Whether everyone is a member (`members` lists no names and no roles).
    pub fn is_public(&self) -> bool {
        self.members.is_empty()
    }

    /// Server admin, or db admin by name or role.
    pub fn is_admin(&self, user: &UserCtx) -> bool {
        self.admins.matches(user)
    }

    /// Db admin, or everyone on a public database, or member by name or role.
    pub fn is_member(&self, user: &UserCtx) -> bool {
        self.is_admin(user) || self.is_public() || self.members.matches(user)
    }

    /// [`is_member`](Self::is_member) with CouchDB's refusal: 401
    /// `You are not authorized to access this db.` for anonymous requests,
    /// 403 `You are not allowed to access this db.` for named users.
    pub fn check_member(&self, user: &UserCtx) -> Result<(), AuthError> {
        if self.is_member(user) {
            Ok(())
        } else if user.is_anonymous() {
            Err(AuthError::unauthorized(
                "You are not authorized to access this db.",
            ))
        } else {
            Err(AuthError::forbidden(
                "You are not allowed to access this db.",
            ))
        }
    }

    /// [`is_admin`](Self::is_admin) with CouchDB's refusal, `You are not a
    /// db or server admin.`: 401 for anonymous requests, 403 for named users.
    pub fn check_admin(&self, user: &UserCtx) -> Result<(), AuthError> {
        const REASON: &str = "You are not a db or server admin.";
        if self.is_admin(user) {
            Ok(())
        } else if user.is_anonymous() {
            Err(AuthError::unauthorized(REASON))
        } else {
            Err(AuthError::forbidden(REASON))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: Value) -> Result<SecurityObject, SecurityError> {
        SecurityObject::parse(&v)
    }

    #[test]
    fn valid_objects_keep_their_json() {
        let v =
            json!({"x": 1, "members": {"names": ["a"], "extra": true}, "admins": {"roles": []}});
        let s = parse(v.clone()).unwrap();
        assert_eq!(s.as_json(), &v);
        assert_eq!(s.members.names, ["a"]);
        assert!(s.admins.is_empty());
        assert_eq!(parse(json!({})).unwrap(), SecurityObject::default());
        let s = parse(json!({"members": {"names": [], "roles": []}})).unwrap();
        assert!(s.is_public());
        assert_eq!(
            s.clone().into_json(),
            json!({"members": {"names": [], "roles": []}})
        );
    }

    #[test]
    fn invalid_objects() {
        use SecurityError::*;
        let cases = [
            (json!({"members": {"names": "x"}}), Names),
            (json!({"members": {"names": [1]}}), Names),
            (json!({"members": {"names": null}}), Names),
            (json!({"members": {"roles": "x"}}), Roles),
            (json!({"members": {"roles": [null]}}), Roles),
            (json!({"admins": {"names": ["a", 2]}}), Names),
            (json!({"admins": []}), SectionNotAnObject),
            (json!({"admins": "x"}), SectionNotAnObject),
            (json!({"members": null}), SectionNotAnObject),
            (json!({"readers": {"names": 5}}), Names),
            (json!([]), NotAnObject),
            (json!("x"), NotAnObject),
            (json!(5), NotAnObject),
            (Value::Null, NotAnObject),
        ];
        for (v, want) in cases {
            let e = parse(v.clone()).unwrap_err();
            assert_eq!(e, want, "{v}");
            let wire = AuthError::from(e);
            assert_eq!(
                (wire.status(), wire.error(), wire.reason()),
                (500, "error", "no_majority"),
                "{v}"
            );
        }
        assert_eq!(Names.to_string(), "names must be a JSON list of strings");
        // `members` present: the legacy `readers` is not looked at.
        assert!(parse(json!({"members": {}, "readers": {"names": 5}})).is_ok());
    }

    #[test]
    fn membership() {
        let anon = UserCtx::anonymous();
        let joe = UserCtx::user("joe", &[]);
        let reader = UserCtx::user("fast", &["reader"]);
        let admin = UserCtx::server_admin("admin");

        let open = SecurityObject::default();
        for u in [&anon, &joe, &reader, &admin] {
            assert!(open.is_member(u));
        }
        assert!(open.is_admin(&admin));
        assert!(!open.is_admin(&joe));

        let s = parse(json!({"members": {"names": ["joe"]}})).unwrap();
        assert!(!s.is_member(&anon));
        assert!(s.is_member(&joe));
        assert!(!s.is_member(&reader));
        assert!(s.is_member(&admin));
        assert_eq!(
            s.check_member(&anon).unwrap_err(),
            AuthError::unauthorized("You are not authorized to access this db.")
        );
        assert_eq!(
            s.check_member(&reader).unwrap_err(),
            AuthError::forbidden("You are not allowed to access this db.")
        );
        assert_eq!(s.check_member(&joe), Ok(()));

        // Legacy `readers`.
        let s = parse(json!({"readers": {"roles": ["reader"]}})).unwrap();
        assert!(!s.is_member(&joe));
        assert!(s.is_member(&reader));

        // Db admins are members; roles and names both work.
        let s =
            parse(json!({"members": {"roles": ["reader"]}, "admins": {"names": ["joe"]}})).unwrap();
        assert!(s.is_member(&joe));
        assert!(s.is_admin(&joe));
        assert!(!s.is_admin(&reader));
        assert_eq!(
            s.check_admin(&reader).unwrap_err(),
            AuthError::forbidden("You are not a db or server admin.")
        );
        assert_eq!(
            s.check_admin(&anon).unwrap_err(),
            AuthError::unauthorized("You are not a db or server admin.")
        );
        assert_eq!(s.check_admin(&admin), Ok(()));

        let s = parse(json!({"admins": {"roles": ["reader"]}})).unwrap();
        assert!(s.is_admin(&reader));
        assert!(s.is_member(&anon), "no members listed: public");

        // Only server admins get in here.
        let s = SecurityObject::admin_only();
        assert!(!s.is_member(&joe));
        assert!(!s.is_member(&anon));
        assert!(s.is_member(&admin));
        assert!(s.is_admin(&admin));
    }

    #[test]
    fn anonymous_matches_no_name_and_escalations_fail() {
        let s = parse(json!({"members": {"names": [""]}, "admins": {"names": ["root"]}})).unwrap();
        let anon = UserCtx::anonymous();
        assert!(!s.is_member(&anon));
        // A role that happens to equal an admin's name is not that admin.
        let sneaky = UserCtx::user("eve", &["root"]);
        assert!(!s.is_admin(&sneaky));
        // A name that equals a role is not that role.
        let s = parse(json!({"admins": {"roles": ["ops"]}})).unwrap();
        assert!(!s.is_admin(&UserCtx::user("ops", &[])));
        assert!(s.is_admin(&UserCtx::user("x", &["ops"])));
    }
}
