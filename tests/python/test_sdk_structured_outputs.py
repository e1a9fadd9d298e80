"""Structured outputs on the `dummy` model through the OpenAI SDK's helpers: `chat.completions.parse`
with pydantic models (nested models, enums, Optional, lists, Literal, recursion, formats) and
`pydantic_function_tool` arguments. Every answer must validate, so `.parsed` is an instance."""

from __future__ import annotations

import datetime
import enum
import json
import uuid
from typing import Any, Literal, Optional

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

import nimbus_testkit as kit

user = kit.user


class Priority(str, enum.Enum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


class Address(BaseModel):
    street: str
    city: str
    postcode: str = Field(pattern=r"^\d{4}$")


class Tag(BaseModel):
    label: str = Field(min_length=3, max_length=12)
    weight: float = Field(ge=0, le=1)


class Person(BaseModel):
    name: str
    age: int = Field(ge=18, le=99)
    priority: Priority
    kind: Literal["customer", "supplier", "partner"]
    role: Literal["admin"]
    home: Address
    work: Optional[Address]
    nickname: Optional[str]
    tags: list[Tag]
    scores: list[float]
    active: bool
    born: datetime.date
    updated: datetime.datetime
    id: uuid.UUID


class Node(BaseModel):
    value: int
    children: list[Node]


class Category(BaseModel):
    name: str
    parent: Optional[Category]


def parse(client: openai.OpenAI, response_format: type[BaseModel], text: str = "Describe someone.", **kwargs: Any):
    return client.chat.completions.parse(
        model="dummy", messages=user(text), response_format=response_format, **kwargs
    )


def test_parse_gives_an_instance_of_a_nested_model(client: openai.OpenAI) -> None:
    completion = parse(client, Person)
    message = completion.choices[0].message
    assert completion.choices[0].finish_reason == "stop"
    person = message.parsed
    assert isinstance(person, Person), message.content
    assert isinstance(person.home, Address)
    assert isinstance(person.priority, Priority)
    assert person.role == "admin"
    assert person.kind in ("customer", "supplier", "partner")
    assert 18 <= person.age <= 99
    assert len(person.home.postcode) == 4 and person.home.postcode.isdigit()
    assert person.tags and all(isinstance(tag, Tag) for tag in person.tags)
    # Strict mode makes every property required: optional ones are answered too.
    raw = json.loads(message.content)
    assert set(raw) == set(Person.model_fields)


def test_the_same_request_parses_to_the_same_object_and_another_request_may_differ(client: openai.OpenAI) -> None:
    first = parse(client, Person, "Describe Ada.").choices[0].message.parsed
    again = parse(client, Person, "Describe Ada.").choices[0].message.parsed
    assert first == again
    others = [parse(client, Person, f"Describe person {i}.").choices[0].message.parsed for i in range(6)]
    assert len({person.model_dump_json() for person in [first, *others]}) > 1


@pytest.mark.parametrize("model", [Node, Category], ids=["tree", "optional-parent"])
def test_recursive_models_parse(client: openai.OpenAI, model: type[BaseModel]) -> None:
    parsed = parse(client, model, "A hierarchy please.").choices[0].message.parsed
    assert isinstance(parsed, model)


class Price(BaseModel):
    # Fractional steps where no whole number fits the bounds.
    amount: float = Field(ge=0.1, le=0.2, multiple_of=0.05)
    share: float = Field(gt=0, lt=1, multiple_of=0.5)
    rate: float = Field(ge=0.25, le=0.35, multiple_of=0.1)
    quarter_hours: float = Field(ge=3, le=4, multiple_of=0.25)


@pytest.mark.parametrize("question", [f"Price {i}?" for i in range(5)])
def test_fractional_multiples_within_bounds_parse(client: openai.OpenAI, question: str) -> None:
    parsed = parse(client, Price, question).choices[0].message.parsed
    assert isinstance(parsed, Price)
    assert 0.1 <= parsed.amount <= 0.2 and parsed.share == 0.5


def test_every_choice_parses_with_n(client: openai.OpenAI) -> None:
    completion = parse(client, Person, n=3)
    assert [choice.index for choice in completion.choices] == [0, 1, 2]
    assert all(isinstance(choice.message.parsed, Person) for choice in completion.choices)


def test_streamed_structured_output_parses(client: openai.OpenAI) -> None:
    with client.chat.completions.stream(model="dummy", messages=user("Stream a person."), response_format=Person) as stream:
        final = stream.get_final_completion()
    assert isinstance(final.choices[0].message.parsed, Person)


WEATHER_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "city": {"type": "string", "minLength": 2},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": ["integer", "null"], "minimum": 1, "maximum": 14},
        "hours": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 23}, "minItems": 1, "maxItems": 3},
        "when": {"type": "string", "format": "date-time"},
        "contact": {"type": "string", "format": "email"},
    },
    "required": ["city", "unit", "days", "hours", "when", "contact"],
}


def test_a_raw_json_schema_answer_validates(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="dummy",
        messages=user("Weather as JSON."),
        response_format={"type": "json_schema", "json_schema": {"name": "weather", "strict": True, "schema": WEATHER_SCHEMA}},
    )
    answer = json.loads(completion.choices[0].message.content)
    jsonschema.validate(answer, WEATHER_SCHEMA, format_checker=jsonschema.FormatChecker())


class GetWeather(BaseModel):
    """Current weather for a city."""

    city: str
    unit: Literal["celsius", "fahrenheit"]
    days: Optional[int]
    priority: Priority
    stops: list[Address]


def test_pydantic_function_tool_arguments_parse(client: openai.OpenAI) -> None:
    completion = client.chat.completions.parse(
        model="dummy",
        messages=user("Weather in Oslo?"),
        tools=[openai.pydantic_function_tool(GetWeather)],
        tool_choice="required",
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.function.name == "GetWeather"
    assert isinstance(call.function.parsed_arguments, GetWeather), call.function.arguments
    assert set(json.loads(call.function.arguments)) == set(GetWeather.model_fields)


def test_plain_tool_arguments_honour_enums_and_fill_optional_properties(client: openai.OpenAI) -> None:
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA}}
    completion = client.chat.completions.create(
        model="dummy", messages=user("Weather?"), tools=[tool], tool_choice={"type": "function", "function": {"name": "get_weather"}}
    )
    arguments = json.loads(completion.choices[0].message.tool_calls[0].function.arguments)
    jsonschema.validate(arguments, WEATHER_SCHEMA, format_checker=jsonschema.FormatChecker())
