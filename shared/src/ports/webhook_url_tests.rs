use super::*;

const STRICT: UrlPolicy = UrlPolicy {
    allow_loopback_http: false,
};
const DEV: UrlPolicy = UrlPolicy {
    allow_loopback_http: true,
};

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

#[test]
fn every_listed_range_is_forbidden_at_both_ends() {
    let forbidden = [
        "0.0.0.0",
        "0.255.255.255",
        "10.0.0.1",
        "10.255.255.255",
        "100.64.0.0",
        "100.127.255.255",
        "127.0.0.1",
        "127.255.255.254",
        "169.254.169.254",
        "169.254.170.2",
        "172.16.0.1",
        "172.31.255.255",
        "192.0.0.8",
        "192.0.2.1",
        "192.88.99.1",
        "192.168.1.1",
        "198.18.0.1",
        "198.19.255.255",
        "198.51.100.7",
        "203.0.113.9",
        "224.0.0.1",
        "239.255.255.255",
        "240.0.0.1",
        "255.255.255.255",
        "::",
        "::1",
        "::127.0.0.1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "::ffff:169.254.169.254",
        "::ffff:0:10.0.0.1",
        "64:ff9b::a9fe:a9fe",
        "64:ff9b::7f00:1",
        "64:ff9b:1::8.8.8.8",
        "2002:7f00:1::",
        "2002:a9fe:a9fe::1",
        "2002:c0a8:101:1::1",
        "100::1",
        "2001::1",
        "2001:db8::1",
        "2001:2::1",
        "2001:2:0:ffff:ffff:ffff:ffff:ffff",
        "2001:10::1",
        "2001:1f:ffff::1",
        "2001:20::1",
        "2001:2f:ffff::1",
        "3fff::1",
        "3fff:fff:ffff::1",
        "5f00::1",
        "5f00:ffff::1",
        "fc00::1",
        "fd00:ec2::254",
        "fe80::1",
        "febf:ffff::1",
        "fec0::1",
        "ff02::1",
    ];
    for text in forbidden {
        assert!(forbidden_address(ip(text)), "{text} should be forbidden");
    }
}

#[test]
fn public_addresses_are_allowed_including_embedded_public_v4() {
    let public = [
        "1.1.1.1",
        "8.8.8.8",
        "9.255.255.255",
        "11.0.0.0",
        "100.63.255.255",
        "100.128.0.0",
        "172.15.255.255",
        "172.32.0.0",
        "192.0.1.1",
        "192.169.0.1",
        "198.17.255.255",
        "198.20.0.0",
        "223.255.255.255",
        "2606:4700:4700::1111",
        "2a00:1450:4001::200e",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
        "2002:808:808::1",
        // Just outside the unroutable prefixes.
        "2001:2:1::1",
        "2001:30::1",
        "2001:f::1",
        "3fff:1000::1",
        "3ffe:ffff::1",
        "5f01::1",
        "5eff:ffff::1",
    ];
    for text in public {
        assert!(!forbidden_address(ip(text)), "{text} should be allowed");
    }
}

#[test]
fn loopback_addresses_are_permitted_only_by_the_development_policy() {
    for text in ["127.0.0.1", "127.0.0.53", "::1"] {
        assert!(!STRICT.permits_address(ip(text)), "{text}");
        assert!(DEV.permits_address(ip(text)), "{text}");
    }
    for text in [
        "::ffff:127.0.0.1",
        "10.0.0.1",
        "192.168.0.1",
        "169.254.169.254",
        "fd00:ec2::254",
        "0.0.0.0",
    ] {
        assert!(!DEV.permits_address(ip(text)), "{text}");
    }
}

#[test]
fn https_urls_with_public_hosts_are_accepted() {
    for text in ["https://example.com/hooks?x=1", "https://[2606:4700::1]/"] {
        let url = WebhookUrl::parse(text, &STRICT).unwrap();
        assert_eq!(url.as_str(), text);
    }
    // Port 443 written out is the same URL.
    assert!(WebhookUrl::parse("https://example.com:443/h", &STRICT).is_ok());
}

#[test]
fn only_port_443_is_accepted_except_for_loopback_on_a_development_server() {
    for (text, port) in [
        ("https://93.184.215.14:8443/h", 8443),
        ("https://example.com:80/", 80),
        ("https://example.com:22/", 22),
        ("https://example.com:6379/", 6379),
        ("https://[2606:4700::1]:8080/", 8080),
    ] {
        for policy in [STRICT, DEV] {
            assert_eq!(
                WebhookUrl::parse(text, &policy).err(),
                Some(WebhookUrlError::Port { port }),
                "{text}"
            );
        }
    }
    // A development server calls its own receivers on whatever port they listen.
    for text in ["https://127.0.0.1:8443/", "http://localhost:9000/", "https://[::1]:1/"] {
        assert!(WebhookUrl::parse(text, &DEV).is_ok(), "{text}");
        assert!(WebhookUrl::parse(text, &STRICT).is_err(), "{text}");
    }
}

#[test]
fn submit_time_checks_name_what_is_wrong() {
    let cases: [(&str, UrlPolicy, WebhookUrlError); 16] = [
        ("", STRICT, WebhookUrlError::Empty),
        (
            "example.com/hook",
            STRICT,
            WebhookUrlError::Invalid {
                reason: "relative URL without a base".into(),
                url: "example.com/hook".into(),
            },
        ),
        (
            "ftp://example.com/",
            STRICT,
            WebhookUrlError::Scheme { scheme: "ftp".into() },
        ),
        ("http://example.com/", STRICT, WebhookUrlError::PlainHttp),
        ("http://example.com/", DEV, WebhookUrlError::PlainHttp),
        ("http://127.0.0.1:8080/", STRICT, WebhookUrlError::PlainHttp),
        ("http://10.0.0.1/", DEV, WebhookUrlError::PlainHttp),
        ("https://user:pw@example.com/", STRICT, WebhookUrlError::Userinfo),
        ("https://user@example.com/", STRICT, WebhookUrlError::Userinfo),
        (
            "https://localhost/",
            STRICT,
            WebhookUrlError::Loopback {
                host: "localhost".into(),
            },
        ),
        (
            "https://api.localhost./",
            STRICT,
            WebhookUrlError::Loopback {
                host: "api.localhost.".into(),
            },
        ),
        (
            "https://127.0.0.1/",
            STRICT,
            WebhookUrlError::Loopback {
                host: "127.0.0.1".into(),
            },
        ),
        (
            "https://10.0.0.1/",
            DEV,
            WebhookUrlError::ForbiddenAddress {
                host: "10.0.0.1".into(),
            },
        ),
        (
            "https://169.254.169.254/latest",
            STRICT,
            WebhookUrlError::ForbiddenAddress {
                host: "169.254.169.254".into(),
            },
        ),
        // WHATWG parsing turns a decimal host into the IPv4 address it denotes.
        (
            "https://2130706433/",
            STRICT,
            WebhookUrlError::Loopback {
                host: "127.0.0.1".into(),
            },
        ),
        (
            "https://[::ffff:127.0.0.1]/",
            DEV,
            WebhookUrlError::ForbiddenAddress {
                host: "::ffff:127.0.0.1".into(),
            },
        ),
    ];
    for (text, policy, expected) in cases {
        assert_eq!(WebhookUrl::parse(text, &policy).err(), Some(expected), "{text}");
    }
}

#[test]
fn the_development_policy_allows_plain_http_to_the_three_loopback_hosts_only() {
    for text in [
        "http://127.0.0.1:9000/hook",
        "http://localhost:9000/hook",
        "http://[::1]:9000/hook",
        "https://127.0.0.2/",
    ] {
        assert!(WebhookUrl::parse(text, &DEV).is_ok(), "{text}");
        assert!(WebhookUrl::parse(text, &STRICT).is_err(), "{text}");
    }
    assert_eq!(
        WebhookUrl::parse("http://127.0.0.2/", &DEV).err(),
        Some(WebhookUrlError::PlainHttp)
    );
}

#[test]
fn long_urls_are_refused_and_quoted_only_as_an_excerpt() {
    let long = format!("https://example.com/{}", "a".repeat(MAX_WEBHOOK_URL_BYTES));
    assert_eq!(
        WebhookUrl::parse(&long, &STRICT).err(),
        Some(WebhookUrlError::TooLong { bytes: long.len() })
    );
    let at_limit = format!("https://example.com/{}", "a".repeat(MAX_WEBHOOK_URL_BYTES - 20));
    assert_eq!(at_limit.len(), MAX_WEBHOOK_URL_BYTES);
    assert!(WebhookUrl::parse(&at_limit, &STRICT).is_ok());
    let bad = format!("https://exa mple.com/{}", "b".repeat(1000));
    let message = WebhookUrl::parse(&bad, &STRICT).unwrap_err().to_string();
    assert!(message.len() < 200, "{message}");
}

#[test]
fn webhook_urls_round_trip_through_serde_as_strings() {
    let url = WebhookUrl::parse("https://example.com/hook?a=b", &STRICT).unwrap();
    let json = serde_json::to_string(&url).unwrap();
    assert_eq!(json, r#""https://example.com/hook?a=b""#);
    assert_eq!(serde_json::from_str::<WebhookUrl>(&json).unwrap(), url);
    assert!(serde_json::from_str::<WebhookUrl>(r#""not a url""#).is_err());
}
