"""The config's frozen sections the core reads (the machine's Policy is made of them): their fields are the
YAML's keys and their defaults the product's only defaults; ``supervisor.config`` parses the files into
them. Pure values."""
