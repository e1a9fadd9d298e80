//! Chat templates: the built-ins, custom templates, `raise_exception`, non-text content.

use super::fake::user;
use crate::config::BuiltInChatTemplate;
use crate::model::{ContentBlock, FileData, Message, ModelRequest, Role};
use crate::providers::lmi::{ChatTemplate, ChatTemplateError};
use crate::providers::ProviderError;

fn conversation() -> ModelRequest {
    let mut request = user("Hi");
    request.system = Some("Be brief.".into());
    request
        .messages
        .push(Message::new(Role::Assistant, vec![ContentBlock::text_block("Hello!")]));
    request
        .messages
        .push(Message::new(Role::User, vec![ContentBlock::text_block("Bye")]));
    request
}

#[test]
fn chatml_is_the_default_and_ends_with_the_assistant_turn() {
    let prompt = ChatTemplate::compile(None).unwrap().render(&conversation()).unwrap();
    assert_eq!(
        prompt,
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
         <|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n"
    );
}

#[test]
fn llama3_renders_headers_with_its_bos_token() {
    let prompt = ChatTemplate::compile(Some("llama3"))
        .unwrap()
        .render(&user("Hi"))
        .unwrap();
    assert_eq!(
        prompt,
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\n"
    );
}

#[test]
fn mistral_puts_instructions_in_the_first_user_turn_and_ends_answers_with_eos() {
    let prompt = ChatTemplate::compile(Some("mistral"))
        .unwrap()
        .render(&conversation())
        .unwrap();
    assert_eq!(prompt, "<s>[INST] Be brief.\n\nHi [/INST]Hello!</s>[INST] Bye [/INST]");
}

#[test]
fn a_custom_template_sees_messages_generation_prompt_and_can_raise() {
    let source = "{% for m in messages %}{% if m.role == 'assistant' %}{{ raise_exception('no replays') }}\
                  {% endif %}[{{ m.role }}]{{ m.content }}{% endfor %}{% if add_generation_prompt %}>{% endif %}";
    let template = ChatTemplate::compile(Some(source)).unwrap();
    assert_eq!(template.render(&user("Hi")).unwrap(), "[user]Hi>");
    let err = template.render(&conversation()).unwrap_err();
    match err {
        ProviderError::UnsupportedParameter { param, message } => {
            assert_eq!(param, "messages");
            assert!(message.contains("no replays"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_template_that_does_not_compile_is_refused() {
    let err = ChatTemplate::compile(Some("{% for m in messages %}")).unwrap_err();
    assert!(matches!(err, ChatTemplateError::DoesNotCompile(_)), "{err:?}");
}

#[test]
fn images_cannot_be_rendered_into_a_prompt() {
    let mut request = user("look");
    request.messages[0].content.push(ContentBlock::File {
        data: FileData::Url {
            url: "https://x/y.png".into(),
        },
        mime_type: Some("image/png".into()),
        filename: None,
        detail: None,
    });
    let err = ChatTemplate::compile(None).unwrap().render(&request).unwrap_err();
    assert!(
        matches!(&err, ProviderError::UnsupportedParameter { param, .. } if param == "messages"),
        "{err:?}"
    );
}

#[test]
fn hugging_face_templates_may_call_python_string_methods() {
    let source = "{% for m in messages %}{% if m.content.startswith('Hi') %}<{{ m.content.strip().upper() }}>\
                  {% endif %}{% endfor %}";
    let template = ChatTemplate::compile(Some(source)).unwrap();
    assert_eq!(template.render(&user("Hi there  ")).unwrap(), "<HI THERE>");
}

#[test]
fn hugging_face_templates_may_use_tojson_macros_and_break() {
    let source = "{% macro turn(m) %}{{ m.role }}={{ m.content | tojson }};{% endmacro %}\
                  {% for m in messages %}{% if m.role == 'assistant' %}{% break %}{% endif %}{{ turn(m) }}{% endfor %}";
    let template = ChatTemplate::compile(Some(source)).unwrap();
    assert_eq!(
        template.render(&conversation()).unwrap(),
        "system=\"Be brief.\";user=\"Hi\";"
    );
}

#[test]
fn a_template_that_fails_to_render_is_a_misconfiguration_not_the_clients_error() {
    // Calling an undefined function is the template's fault, whatever the conversation.
    let template = ChatTemplate::compile(Some("{{ no_such_function() }}")).unwrap();
    let err = template.render(&user("Hi")).unwrap_err();
    assert!(matches!(err, ProviderError::Misconfigured(_)), "{err:?}");
}

#[test]
fn every_built_in_template_name_compiles() {
    for template in BuiltInChatTemplate::ALL {
        ChatTemplate::compile(Some(template.name())).unwrap();
    }
}
