//! User documents in MongoDB's `system.users` shape, and building them from a password.
//! A password is turned into salted, iterated keys here and then dropped: it is never
//! stored, returned or logged.

use bson::spec::BinarySubtype;
use bson::{doc, Binary, Bson, Document};
use wire::{MongoError, MongoResult};

use super::scram::{b64, unb64, Mechanism, ScramCredential};
use super::store::doc_id;

/// A role reference `{role, db}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RoleName {
    pub role: String,
    pub db: String,
}

impl RoleName {
    pub fn to_document(&self) -> Document {
        doc! {"role": &self.role, "db": &self.db}
    }

    /// A role as commands accept it: `"name"` (in `default_db`) or `{role, db}`.
    pub fn parse(v: &Bson, default_db: &str) -> MongoResult<RoleName> {
        match v {
            Bson::String(r) => Ok(RoleName {
                role: r.clone(),
                db: default_db.to_string(),
            }),
            Bson::Document(d) => match (d.get_str("role"), d.get_str("db")) {
                (Ok(role), Ok(db)) => Ok(RoleName {
                    role: role.into(),
                    db: db.into(),
                }),
                _ => Err(MongoError::failed_to_parse(format!(
                    "role must have string fields 'role' and 'db': {d}"
                ))),
            },
            other => Err(MongoError::failed_to_parse(format!(
                "role must be a string or a document, not {other}"
            ))),
        }
    }

    pub fn parse_list(
        v: Option<&Bson>,
        default_db: &str,
        field: &str,
    ) -> MongoResult<Vec<RoleName>> {
        match v {
            Some(Bson::Array(a)) => a.iter().map(|r| RoleName::parse(r, default_db)).collect(),
            None => Err(MongoError::failed_to_parse(format!(
                "BSON field '{field}' is missing but a required field"
            ))),
            Some(_) => Err(MongoError::type_mismatch(format!(
                "BSON field '{field}' is the wrong type, expected type 'array'"
            ))),
        }
    }

    pub fn list_to_bson(roles: &[RoleName]) -> Bson {
        Bson::Array(
            roles
                .iter()
                .map(|r| Bson::Document(r.to_document()))
                .collect(),
        )
    }
}

impl std::fmt::Display for RoleName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.role, self.db)
    }
}

/// The parts of a user document authentication and authorization need.
#[derive(Debug, Clone)]
pub struct UserRecord {
    pub user: String,
    pub db: String,
    pub credentials: Vec<(Mechanism, ScramCredential)>,
    pub roles: Vec<RoleName>,
}

impl UserRecord {
    pub fn credential(&self, m: Mechanism) -> Option<&ScramCredential> {
        self.credentials
            .iter()
            .find(|(k, _)| *k == m)
            .map(|(_, c)| c)
    }

    pub fn from_document(d: &Document) -> MongoResult<UserRecord> {
        let bad = || {
            MongoError::internal(format!(
                "malformed user document {}",
                d.get("_id").unwrap_or(&Bson::Null)
            ))
        };
        let mut credentials = Vec::new();
        if let Ok(creds) = d.get_document("credentials") {
            for m in Mechanism::ALL {
                if let Ok(c) = creds.get_document(m.name()) {
                    let field = |k: &str| c.get_str(k).ok().and_then(unb64).ok_or_else(bad);
                    credentials.push((
                        m,
                        ScramCredential {
                            iterations: c.get_i32("iterationCount").map_err(|_| bad())? as u32,
                            salt: field("salt")?,
                            stored_key: field("storedKey")?,
                            server_key: field("serverKey")?,
                        },
                    ));
                }
            }
        }
        let roles = match d.get("roles") {
            Some(Bson::Array(a)) => a
                .iter()
                .map(|r| RoleName::parse(r, ""))
                .collect::<MongoResult<_>>()?,
            _ => Vec::new(),
        };
        Ok(UserRecord {
            user: d.get_str("user").map_err(|_| bad())?.to_string(),
            db: d.get_str("db").map_err(|_| bad())?.to_string(),
            credentials,
            roles,
        })
    }
}

/// Parses `mechanisms` from createUser/updateUser (default: both SCRAM mechanisms).
pub fn parse_mechanisms(v: Option<&Bson>) -> MongoResult<Vec<Mechanism>> {
    let Some(v) = v else {
        return Ok(Mechanism::ALL.to_vec());
    };
    let Bson::Array(names) = v else {
        return Err(MongoError::type_mismatch("mechanisms must be an array"));
    };
    let mut out = Vec::new();
    for n in names {
        let name = n.as_str().unwrap_or_default();
        let m = Mechanism::from_name(name)
            .ok_or_else(|| MongoError::bad_value(format!("Unknown auth mechanism '{name}'")))?;
        if !out.contains(&m) {
            out.push(m);
        }
    }
    if out.is_empty() {
        return Err(MongoError::bad_value("mechanisms field must not be empty"));
    }
    Ok(out)
}

/// Derives the `credentials` sub-document for a password. Runs PBKDF2 (tens of
/// milliseconds), so callers run it on the blocking pool.
pub fn credentials_document(
    user: &str,
    password: &str,
    mechanisms: &[Mechanism],
) -> MongoResult<Document> {
    let mut creds = Document::new();
    for &m in mechanisms {
        let mut salt = vec![0u8; m.salt_len()];
        super::nonce::NonceSource::User.fill(&mut salt);
        let c = m
            .derive(user, password, salt, m.default_iterations())
            .map_err(MongoError::bad_value)?;
        creds.insert(
            m.name(),
            doc! {
                "iterationCount": c.iterations as i32,
                "salt": b64(&c.salt),
                "storedKey": b64(&c.stored_key),
                "serverKey": b64(&c.server_key),
            },
        );
    }
    Ok(creds)
}

/// A new user document; `credentials` comes from [`credentials_document`].
pub fn new_user_document(
    db: &str,
    user: &str,
    credentials: Document,
    roles: &[RoleName],
    custom_data: Option<&Document>,
) -> Document {
    let mut d = doc! {
        "_id": doc_id(db, user),
        "userId": Binary { subtype: BinarySubtype::Uuid, bytes: bson::Uuid::new().bytes().to_vec() },
        "user": user,
        "db": db,
        "credentials": credentials,
        "roles": RoleName::list_to_bson(roles),
    };
    if let Some(c) = custom_data {
        d.insert("customData", c.clone());
    }
    d
}

/// A user document as `usersInfo` shows it: credentials only on request, and never more
/// than the salted keys MongoDB itself shows.
pub fn public_view(d: &Document, show_credentials: bool) -> Document {
    let mut out = Document::new();
    for k in ["_id", "userId", "user", "db", "customData", "roles"] {
        if let Some(v) = d.get(k) {
            out.insert(k, v.clone());
        }
    }
    let mechs: Vec<&str> = d
        .get_document("credentials")
        .map(|c| c.keys().map(String::as_str).collect())
        .unwrap_or_default();
    out.insert("mechanisms", mechs);
    if show_credentials {
        if let Some(c) = d.get("credentials") {
            out.insert("credentials", c.clone());
        }
    }
    out
}

/// Validates a user or role name from a command.
pub fn check_name(kind: &str, name: &str) -> MongoResult<()> {
    if name.is_empty() {
        return Err(MongoError::bad_value(format!(
            "{kind} name must not be empty"
        )));
    }
    if name.len() > super::scram::MAX_USER_LEN {
        return Err(MongoError::bad_value(format!(
            "{kind} name is longer than {} bytes",
            super::scram::MAX_USER_LEN
        )));
    }
    if name.contains('\0') {
        return Err(MongoError::bad_value(format!(
            "{kind} name must not contain NUL"
        )));
    }
    Ok(())
}
