//! SCRAM (RFC 5802 / RFC 7677) as MongoDB speaks it: the server side of a conversation,
//! and the key derivation used when a password is set. The server never runs PBKDF2
//! during a handshake: stored credentials already hold StoredKey and ServerKey, so
//! verifying a proof costs two HMACs and a hash (the client does the iterating).

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use hmac::digest::KeyInit;
use hmac::{Hmac, Mac};
use sha1::Sha1;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The SCRAM mechanisms Bulwark supports, SCRAM-SHA-256 first (the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    Sha256,
    Sha1,
}

/// MongoDB's default iteration counts (`scramSHA256IterationCount`, `scramIterationCount`).
pub const SHA256_ITERATIONS: u32 = 15_000;
pub const SHA1_ITERATIONS: u32 = 10_000;

impl Mechanism {
    pub const ALL: [Mechanism; 2] = [Mechanism::Sha256, Mechanism::Sha1];

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Sha256 => "SCRAM-SHA-256",
            Mechanism::Sha1 => "SCRAM-SHA-1",
        }
    }

    pub fn from_name(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    pub fn default_iterations(self) -> u32 {
        match self {
            Mechanism::Sha256 => SHA256_ITERATIONS,
            Mechanism::Sha1 => SHA1_ITERATIONS,
        }
    }

    /// Salt length MongoDB uses: the hash's output size minus 4 bytes of PBKDF2 block index.
    pub fn salt_len(self) -> usize {
        self.hash_len() - 4
    }

    pub fn hash_len(self) -> usize {
        match self {
            Mechanism::Sha256 => 32,
            Mechanism::Sha1 => 20,
        }
    }

    pub fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::Sha256 => mac::<Hmac<Sha256>>(key, data),
            Mechanism::Sha1 => mac::<Hmac<Sha1>>(key, data),
        }
    }

    pub fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::Sha256 => Sha256::digest(data).to_vec(),
            Mechanism::Sha1 => Sha1::digest(data).to_vec(),
        }
    }

    /// The password as the mechanism hashes it: SCRAM-SHA-1 uses MongoDB's legacy
    /// `md5("user:mongo:password")` hex digest; SCRAM-SHA-256 uses the SASLprep'd password.
    pub fn prepare_password(self, user: &str, password: &str) -> Result<String, String> {
        match self {
            Mechanism::Sha1 => {
                use md5::Digest as _;
                let digest = md5::Md5::digest(format!("{user}:mongo:{password}").as_bytes());
                Ok(digest.iter().map(|b| format!("{b:02x}")).collect())
            }
            Mechanism::Sha256 => stringprep::saslprep(password)
                .map(|p| p.into_owned())
                .map_err(|_| "password is not valid under SASLprep".to_string()),
        }
    }

    /// PBKDF2 (RFC 5802's `Hi`): the salted password. Slow on purpose; only run when a
    /// password is set, and by clients.
    pub fn salted_password(self, prepared: &str, salt: &[u8], iterations: u32) -> Vec<u8> {
        let mut out = vec![0u8; self.hash_len()];
        // Output lengths are the hash sizes, which PBKDF2 always accepts.
        match self {
            Mechanism::Sha256 => {
                let _ =
                    pbkdf2::pbkdf2::<Hmac<Sha256>>(prepared.as_bytes(), salt, iterations, &mut out);
            }
            Mechanism::Sha1 => {
                let _ =
                    pbkdf2::pbkdf2::<Hmac<Sha1>>(prepared.as_bytes(), salt, iterations, &mut out);
            }
        }
        out
    }

    /// Derives the stored credential for a password (what `createUser` keeps).
    pub fn derive(
        self,
        user: &str,
        password: &str,
        salt: Vec<u8>,
        iterations: u32,
    ) -> Result<ScramCredential, String> {
        let prepared = self.prepare_password(user, password)?;
        let salted = self.salted_password(&prepared, &salt, iterations);
        let keys = self.keys(&salted);
        Ok(ScramCredential {
            iterations,
            salt,
            stored_key: keys.stored_key,
            server_key: keys.server_key,
        })
    }

    /// ClientKey, StoredKey and ServerKey from a salted password (RFC 5802 §3).
    pub fn keys(self, salted: &[u8]) -> Keys {
        let client_key = self.hmac(salted, b"Client Key");
        Keys {
            stored_key: self.hash(&client_key),
            server_key: self.hmac(salted, b"Server Key"),
            client_key,
        }
    }
}

pub struct Keys {
    pub client_key: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

fn mac<M: Mac + KeyInit>(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut m = <M as KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

pub fn xor(a: &[u8], b: &[u8]) -> Vec<u8> {
    a.iter().zip(b).map(|(x, y)| x ^ y).collect()
}

pub fn b64(bytes: &[u8]) -> String {
    B64.encode(bytes)
}

pub fn unb64(text: &str) -> Option<Vec<u8>> {
    B64.decode(text).ok()
}

/// One mechanism's stored credential (MongoDB's `credentials.SCRAM-SHA-256` shape).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub iterations: u32,
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

/// Why a SCRAM step failed. `Authentication` is the only one that may depend on the
/// user or password, and it carries no detail so the reply never says which it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScramError {
    Malformed(String),
    Authentication,
}

/// The client's first message, parsed.
pub struct ClientFirst {
    /// The user name with SCRAM's `=2C`/`=3D` escapes undone.
    pub user: String,
    pub client_nonce: String,
    /// `n=...,r=...` without the GS2 header: it is part of the AuthMessage.
    pub bare: String,
    /// `n,,` or `y,,`: echoed back base64-encoded in the client's final message.
    pub gs2_header: String,
}

/// Longest user name accepted in a SCRAM message; MongoDB has no smaller limit than the
/// message size, but nothing legitimate comes close and a bound keeps errors clear.
pub const MAX_USER_LEN: usize = 1024;

pub fn parse_client_first(payload: &[u8]) -> Result<ClientFirst, ScramError> {
    let text = std::str::from_utf8(payload)
        .map_err(|_| ScramError::Malformed("SCRAM message is not valid UTF-8".into()))?;
    // gs2-header: cbind-flag "," [authzid] ","
    let mut parts = text.splitn(3, ',');
    let (Some(cbind), Some(authzid), Some(bare)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(ScramError::Malformed(format!(
            "Incorrect number of arguments for first SCRAM client message, got {}; expected at least 3",
            text.split(',').count()
        )));
    };
    match cbind {
        "n" | "y" => {}
        c if c.starts_with("p=") => {
            return Err(ScramError::Malformed(
                "Server does not support channel binding".into(),
            ))
        }
        _ => {
            return Err(ScramError::Malformed(format!(
                "Incorrect SCRAM client message prefix: {cbind}"
            )))
        }
    }
    if !authzid.is_empty() && !authzid.starts_with("a=") {
        return Err(ScramError::Malformed(format!(
            "Incorrect SCRAM authzid: {authzid}"
        )));
    }
    let mut fields = bare.split(',');
    let user = fields
        .next()
        .and_then(|f| f.strip_prefix("n="))
        .ok_or_else(|| ScramError::Malformed("Invalid SCRAM user name".into()))?;
    let nonce = fields
        .next()
        .and_then(|f| f.strip_prefix("r="))
        .ok_or_else(|| ScramError::Malformed("Invalid SCRAM client nonce".into()))?;
    if user.is_empty() || user.len() > MAX_USER_LEN {
        return Err(ScramError::Malformed(format!(
            "SCRAM user name must be 1 to {MAX_USER_LEN} bytes"
        )));
    }
    if nonce.is_empty() || nonce.len() > 1024 || nonce.contains(',') {
        return Err(ScramError::Malformed("Invalid SCRAM client nonce".into()));
    }
    Ok(ClientFirst {
        user: unescape_user(user)?,
        client_nonce: nonce.to_string(),
        bare: bare.to_string(),
        gs2_header: format!("{cbind},{authzid},"),
    })
}

fn unescape_user(raw: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        let esc = rest.get(i..i + 3);
        match esc {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => {
                return Err(ScramError::Malformed(
                    "Invalid SCRAM user name escape".into(),
                ))
            }
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Escapes a user name for a SCRAM message (client side).
pub fn escape_user(user: &str) -> String {
    user.replace('=', "=3D").replace(',', "=2C")
}

/// Server state between the first and the final client message.
pub struct ServerConversation {
    pub mechanism: Mechanism,
    pub user: String,
    credential: ScramCredential,
    /// The user does not exist: `credential` is fake and the proof check must fail,
    /// after doing the same work as for a real user.
    fake: bool,
    gs2_header: String,
    nonce: String,
    auth_message_prefix: String,
}

impl ServerConversation {
    /// Answers the client's first message with `r=<nonce>,s=<salt>,i=<iterations>`.
    pub fn start(
        mechanism: Mechanism,
        first: ClientFirst,
        credential: ScramCredential,
        fake: bool,
        server_nonce: &str,
    ) -> (ServerConversation, String) {
        let nonce = format!("{}{}", first.client_nonce, server_nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            b64(&credential.salt),
            credential.iterations
        );
        let conv = ServerConversation {
            mechanism,
            user: first.user,
            credential,
            fake,
            gs2_header: first.gs2_header,
            auth_message_prefix: format!("{},{server_first}", first.bare),
            nonce,
        };
        (conv, server_first)
    }

    /// Checks the client's proof; on success returns `v=<ServerSignature>`.
    pub fn finish(&self, payload: &[u8]) -> Result<String, ScramError> {
        let text = std::str::from_utf8(payload)
            .map_err(|_| ScramError::Malformed("SCRAM message is not valid UTF-8".into()))?;
        let fields: Vec<&str> = text.split(',').collect();
        if fields.len() < 3 {
            return Err(ScramError::Malformed(format!(
                "Incorrect number of arguments for final SCRAM client message, got {}; expected at least 3",
                fields.len()
            )));
        }
        let cbind = fields[0]
            .strip_prefix("c=")
            .ok_or_else(|| ScramError::Malformed("Incorrect SCRAM channel binding field".into()))?;
        let nonce = fields[1]
            .strip_prefix("r=")
            .ok_or_else(|| ScramError::Malformed("Incorrect SCRAM nonce field".into()))?;
        let proof = fields[fields.len() - 1]
            .strip_prefix("p=")
            .and_then(unb64)
            .ok_or_else(|| ScramError::Malformed("Incorrect SCRAM client proof".into()))?;
        if unb64(cbind).as_deref() != Some(self.gs2_header.as_bytes()) {
            return Err(ScramError::Malformed(
                "SCRAM channel binding does not match".into(),
            ));
        }
        if nonce != self.nonce {
            return Err(ScramError::Malformed(
                "Unmatched SCRAM nonce received from client in second step".into(),
            ));
        }
        let without_proof = &text[..text.len() - fields[fields.len() - 1].len() - 1];
        let auth_message = format!("{},{without_proof}", self.auth_message_prefix);
        let m = self.mechanism;
        let signature = m.hmac(&self.credential.stored_key, auth_message.as_bytes());
        let proof_ok = proof.len() == signature.len() && {
            let client_key = xor(&proof, &signature);
            bool::from(m.hash(&client_key).ct_eq(&self.credential.stored_key))
        };
        let server_signature = m.hmac(&self.credential.server_key, auth_message.as_bytes());
        if !proof_ok || self.fake {
            return Err(ScramError::Authentication);
        }
        Ok(format!("v={}", b64(&server_signature)))
    }
}

/// The client side, for the benchmark and tests: the first message, then the final one
/// computed from the server's first message.
pub struct ClientConversation {
    pub mechanism: Mechanism,
    user: String,
    password: String,
    client_first_bare: String,
    nonce: String,
    server_signature: Vec<u8>,
}

impl ClientConversation {
    pub fn new(mechanism: Mechanism, user: &str, password: &str, nonce: &str) -> Self {
        ClientConversation {
            mechanism,
            user: user.to_string(),
            password: password.to_string(),
            client_first_bare: format!("n={},r={nonce}", escape_user(user)),
            nonce: nonce.to_string(),
            server_signature: Vec::new(),
        }
    }

    pub fn first(&self) -> String {
        format!("n,,{}", self.client_first_bare)
    }

    /// `salted` caches the PBKDF2 output across handshakes, as drivers do.
    pub fn final_message(
        &mut self,
        server_first: &str,
        salted: &mut Option<Vec<u8>>,
    ) -> Result<String, String> {
        let mut r = None;
        let mut s = None;
        let mut i = None;
        for f in server_first.split(',') {
            match f.split_at_checked(2) {
                Some(("r=", v)) => r = Some(v),
                Some(("s=", v)) => s = unb64(v),
                Some(("i=", v)) => i = v.parse::<u32>().ok(),
                _ => {}
            }
        }
        let (Some(r), Some(s), Some(i)) = (r, s, i) else {
            return Err(format!("bad server-first message: {server_first}"));
        };
        if !r.starts_with(&self.nonce) {
            return Err("server nonce does not extend ours".into());
        }
        let m = self.mechanism;
        let salted = match salted {
            Some(p) => p.clone(),
            None => {
                let prepared = m.prepare_password(&self.user, &self.password)?;
                let p = m.salted_password(&prepared, &s, i);
                *salted = Some(p.clone());
                p
            }
        };
        let keys = m.keys(&salted);
        let without_proof = format!("c=biws,r={r}");
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let signature = m.hmac(&keys.stored_key, auth_message.as_bytes());
        self.server_signature = m.hmac(&keys.server_key, auth_message.as_bytes());
        Ok(format!(
            "{without_proof},p={}",
            b64(&xor(&keys.client_key, &signature))
        ))
    }

    pub fn verify_server(&self, server_final: &str) -> bool {
        server_final.strip_prefix("v=").and_then(unb64).as_deref()
            == Some(&self.server_signature[..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's SCRAM-SHA-256 example, end to end through both sides.
    #[test]
    fn rfc7677_example() {
        let m = Mechanism::Sha256;
        let salt = unb64("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let cred = m.derive("user", "pencil", salt, 4096).unwrap();
        let mut client = ClientConversation::new(m, "user", "pencil", "rOprNGfwEbeRWgbNEkqO");
        let first = parse_client_first(client.first().as_bytes()).unwrap();
        let (conv, server_first) =
            ServerConversation::start(m, first, cred, false, "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0");
        assert_eq!(server_first, "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096");
        let fin = client.final_message(&server_first, &mut None).unwrap();
        assert_eq!(fin, "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=");
        let v = conv.finish(fin.as_bytes()).unwrap();
        assert_eq!(v, "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
        assert!(client.verify_server(&v));
    }

    #[test]
    fn wrong_password_and_fake_user_fail_alike() {
        let m = Mechanism::Sha1;
        let cred = m.derive("u", "right", vec![1; 16], 100).unwrap();
        for (password, fake) in [("wrong", false), ("right", true)] {
            let mut client = ClientConversation::new(m, "u", password, "abc");
            let first = parse_client_first(client.first().as_bytes()).unwrap();
            let (conv, sf) = ServerConversation::start(m, first, cred.clone(), fake, "xyz");
            let fin = client.final_message(&sf, &mut None).unwrap();
            assert_eq!(conv.finish(fin.as_bytes()), Err(ScramError::Authentication));
        }
    }

    #[test]
    fn malformed_messages_are_errors_not_panics() {
        for bad in [
            "",
            "n",
            "n,,",
            "x,,n=a,r=b",
            "n,,n=,r=b",
            "n,,n=a",
            "n,,n=a=ZZ,r=b",
            "p=tls,,n=a,r=b",
        ] {
            assert!(
                matches!(
                    parse_client_first(bad.as_bytes()),
                    Err(ScramError::Malformed(_))
                ),
                "{bad}"
            );
        }
        let m = Mechanism::Sha256;
        let first = parse_client_first(b"n,,n=a=2Cb,r=abc").unwrap();
        assert_eq!(first.user, "a,b");
        let cred = m.derive("a", "p", vec![0; 28], 10).unwrap();
        let (conv, _) = ServerConversation::start(m, first, cred, false, "def");
        for bad in [
            "",
            "c=biws",
            "c=biws,r=abcdef,p=@@",
            "c=biws,r=other,p=AAAA",
            "c=eHl6,r=abcdef,p=AAAA",
        ] {
            assert!(
                matches!(conv.finish(bad.as_bytes()), Err(ScramError::Malformed(_))),
                "{bad}"
            );
        }
        assert_eq!(
            conv.finish(b"c=biws,r=abcdef,p=AAAA"),
            Err(ScramError::Authentication)
        );
    }

    #[test]
    fn sha256_passwords_are_saslprepped() {
        let m = Mechanism::Sha256;
        // U+00AD (soft hyphen) maps to nothing under SASLprep.
        let a = m.derive("u", "pass\u{00AD}word", vec![2; 28], 50).unwrap();
        let b = m.derive("u", "password", vec![2; 28], 50).unwrap();
        assert_eq!(a, b);
        assert!(m.prepare_password("u", "bad\u{0007}").is_err());
    }
}
