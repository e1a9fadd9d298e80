//! `routes!`: a handler's route, registered from its `#[utoipa::path]` (path and methods).
//!
//! With the `openapi` feature (the local server, the tests) this is `utoipa_axum::routes!`: the
//! route and its documented operation and schemas. Without it (the Lambda functions) only the path
//! and the methods are read: no operation or schema is built at start-up, so none of the code that
//! builds them is linked. The routes served are the same either way (`lean_routes_serve_what_the_documented_routes_serve`
//! below, and the Lambda tests, which run the functions built without the feature); `/openapi.json` serves the checked-in document in both.

/// `(schemas, paths, method router)` of one or more handlers, for `OpenApiRouter::routes`: the
/// paths and methods of each handler's `#[utoipa::path]`, with no operation or schema.
#[cfg(any(test, not(feature = "openapi")))]
macro_rules! lean_routes {
    ( @each $paths:ident $router:ident ; ) => {};
    ( @each $paths:ident $router:ident ; $module:ident :: $handler:ident $(, $($rest:tt)*)? ) => {
        utoipa_axum::paste! {
            $crate::http::api_routes::lean_routes!(@one $paths $router ; $module::[<__path_ $handler>], $module::$handler);
        }
        $crate::http::api_routes::lean_routes!(@each $paths $router ; $($($rest)*)?);
    };
    ( @each $paths:ident $router:ident ; $handler:ident $(, $($rest:tt)*)? ) => {
        utoipa_axum::paste! {
            $crate::http::api_routes::lean_routes!(@one $paths $router ; [<__path_ $handler>], $handler);
        }
        $crate::http::api_routes::lean_routes!(@each $paths $router ; $($($rest)*)?);
    };
    ( @one $paths:ident $router:ident ; $documented:path, $handler:path ) => {
        let methods = <$documented as utoipa::Path>::methods();
        for method in &methods {
            $router = $router.on(utoipa_axum::PathItemExt::to_method_filter(method), $handler);
        }
        let operation = utoipa::openapi::path::Operation::default();
        $paths.add_path_operation(<$documented as utoipa::Path>::path(), methods, operation);
    };
    ( $($handlers:tt)+ ) => {{
        let mut paths = utoipa::openapi::path::Paths::new();
        #[allow(unused_mut)]
        let mut router = axum::routing::MethodRouter::new();
        $crate::http::api_routes::lean_routes!(@each paths router ; $($handlers)+);
        (Vec::new(), paths, router)
    }};
}
#[cfg(any(test, not(feature = "openapi")))]
pub(crate) use lean_routes;

#[cfg(feature = "openapi")]
pub(crate) use utoipa_axum::routes;

#[cfg(not(feature = "openapi"))]
pub(crate) use lean_routes as routes;

#[cfg(test)]
mod tests {
    use utoipa_axum::router::OpenApiRouter;

    #[utoipa::path(get, path = "/things", responses((status = 200)))]
    async fn list_things() {}

    #[utoipa::path(post, path = "/things", responses((status = 200)))]
    async fn create_thing() {}

    mod nested {
        #[utoipa::path(delete, path = "/things/{id}", params(("id" = String, Path)), responses((status = 200)))]
        pub(super) async fn delete_thing() {}
    }

    /// Each path and its methods, as a router's document lists them.
    fn paths_and_methods(router: OpenApiRouter) -> Vec<(String, Vec<&'static str>)> {
        let document = router.into_openapi();
        document
            .paths
            .paths
            .iter()
            .map(|(path, item)| {
                let methods = [
                    ("get", item.get.is_some()),
                    ("post", item.post.is_some()),
                    ("put", item.put.is_some()),
                    ("delete", item.delete.is_some()),
                ];
                (
                    path.clone(),
                    methods.iter().filter(|(_, on)| *on).map(|(m, _)| *m).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn lean_routes_serve_what_the_documented_routes_serve() {
        let documented = OpenApiRouter::default()
            .routes(utoipa_axum::routes!(list_things, create_thing))
            .routes(utoipa_axum::routes!(nested::delete_thing));
        let lean = OpenApiRouter::default()
            .routes(lean_routes!(list_things, create_thing))
            .routes(lean_routes!(nested::delete_thing));
        let lean = paths_and_methods(lean);
        assert_eq!(lean, paths_and_methods(documented));
        assert_eq!(
            lean,
            vec![
                ("/things".to_owned(), vec!["get", "post"]),
                ("/things/{id}".to_owned(), vec!["delete"]),
            ]
        );
    }

    #[tokio::test]
    async fn lean_routes_answer_on_their_paths_and_methods() {
        use tower::ServiceExt;
        let router = axum::Router::from(
            OpenApiRouter::default()
                .routes(lean_routes!(list_things, create_thing))
                .routes(lean_routes!(nested::delete_thing)),
        );
        for (method, path, status) in [
            ("GET", "/things", 200),
            ("POST", "/things", 200),
            ("DELETE", "/things/7", 200),
            ("PUT", "/things", 405),
            ("GET", "/other", 404),
        ] {
            let request = axum::http::Request::builder()
                .method(method)
                .uri(path)
                .body(axum::body::Body::empty());
            let response = router.clone().oneshot(request.unwrap()).await.unwrap();
            assert_eq!(response.status().as_u16(), status, "{method} {path}");
        }
    }
}
