# One image for the web server and the workers (docker-compose.yml picks the command).
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app

COPY pyproject.toml README.md ./
COPY loopatlas loopatlas
COPY atlas atlas
COPY playground playground
COPY workers workers
COPY kernels kernels
RUN pip install .

COPY . .
RUN SECRET_KEY=collectstatic-only python manage.py collectstatic --noinput

EXPOSE 8000
CMD ["uvicorn", "loopatlas.asgi:application", "--host", "0.0.0.0", "--port", "8000"]
