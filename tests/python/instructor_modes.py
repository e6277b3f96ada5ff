"""Run by test_structured_clients.py with .venv-instructor's Python (instructor
cannot be installed beside the openai of .venv): asks the server at argv[1]
for a pydantic model in each of instructor's TOOLS and JSON_SCHEMA modes and
prints one JSON line per mode with what it got back."""

import json
import sys
from typing import Literal

import instructor
import openai
from pydantic import BaseModel, Field


class Weather(BaseModel):
    city: str = Field(min_length=1, max_length=40)
    unit: Literal["celsius", "fahrenheit"]
    days: int = Field(ge=1, le=7)


def main() -> None:
    base = sys.argv[1]
    for mode in (instructor.Mode.TOOLS, instructor.Mode.JSON_SCHEMA):
        client = instructor.from_openai(openai.OpenAI(base_url=f"{base}/v1", api_key="unused"), mode=mode)
        # No retries: an answer that fails its model must fail the run.
        weather, completion = client.chat.completions.create_with_completion(
            model="mock",
            response_model=Weather,
            max_retries=0,
            messages=[{"role": "user", "content": "The weather in Lyon for three days"}],
        )
        request = completion.choices[0]
        print(json.dumps({
            "mode": mode.value,
            "weather": weather.model_dump(),
            "finish_reason": request.finish_reason,
            "tool_calls": len(request.message.tool_calls or []),
        }), flush=True)


if __name__ == "__main__":
    main()
