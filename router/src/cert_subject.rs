//! A certificate's subject as MongoDB names X.509 users: the distinguished name in RFC
//! 2253 form (`CN=alice,OU=Eng,O=Acme,C=US`). The TLS layer reads it from a client's
//! verified certificate, and MONGODB-X509 authentication (`commands/authenticate.rs`)
//! logs the client in as that user of the `$external` database.

use x509_parser::prelude::{FromDer, X509Certificate};
use x509_parser::x509::{AttributeTypeAndValue, X509Name};

/// The subject of a DER certificate as an RFC 2253 string; `None` when it does not parse.
pub fn subject_of(der: &[u8]) -> Option<String> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    Some(rfc2253(cert.subject()))
}

/// RFC 2253: the relative distinguished names last first, separated by `,`; the
/// attributes of one name by `+`.
fn rfc2253(name: &X509Name) -> String {
    let rdns: Vec<String> = name
        .iter()
        .map(|rdn| rdn.iter().map(attribute).collect::<Vec<String>>().join("+"))
        .collect();
    rdns.into_iter().rev().collect::<Vec<String>>().join(",")
}

fn attribute(a: &AttributeTypeAndValue) -> String {
    let oid = a.attr_type().to_id_string();
    let key = short_name(&oid).map_or(oid.clone(), str::to_string);
    match a.as_str() {
        Ok(value) => format!("{key}={}", escape(value)),
        // Not a string: the value's encoding in hex, as RFC 2253 writes it.
        Err(_) => format!("{key}=#{}", hex(a.attr_value().data)),
    }
}

fn short_name(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "0.9.2342.19200300.100.1.1" => "UID",
        "0.9.2342.19200300.100.1.25" => "DC",
        "1.2.840.113549.1.9.1" => "emailAddress",
        _ => return None,
    })
}

/// RFC 2253's escaping: `,+"\<>;` anywhere, `#` or a space first, a space last.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(push: &[(rcgen::DnType, &str)]) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        for (t, v) in push {
            params.distinguished_name.push(t.clone(), *v);
        }
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn subjects_read_last_name_first() {
        use rcgen::DnType::*;
        let der = cert(&[
            (CountryName, "US"),
            (OrganizationName, "Acme"),
            (OrganizationalUnitName, "Eng"),
            (CommonName, "alice"),
        ]);
        assert_eq!(subject_of(&der).unwrap(), "CN=alice,OU=Eng,O=Acme,C=US");
    }

    #[test]
    fn special_characters_are_escaped() {
        assert_eq!(escape("a,b+c"), "a\\,b\\+c");
        assert_eq!(escape(" lead"), "\\ lead");
        assert_eq!(escape("#x"), "\\#x");
        assert_eq!(escape("trail "), "trail\\ ");
        let der = cert(&[(rcgen::DnType::CommonName, "Smith, J")]);
        assert_eq!(subject_of(&der).unwrap(), "CN=Smith\\, J");
        assert_eq!(subject_of(b"not a certificate"), None);
    }
}
