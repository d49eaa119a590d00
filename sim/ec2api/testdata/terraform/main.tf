# An aws_instance with data sources, applied against the muster sim by
# TestTerraform (sim/ec2api/clients_test.go).
terraform {
  required_providers {
    aws = { source = "hashicorp/aws" }
  }
}

variable "endpoint" { type = string }

provider "aws" {
  region                      = "us-east-1"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  skip_region_validation      = true
  endpoints {
    ec2 = var.endpoint
  }
}

data "aws_availability_zones" "all" {}

data "aws_ami" "ubuntu" {
  owners      = ["099720109477"]
  most_recent = true
  filter {
    name   = "name"
    values = ["*noble-24.04-amd64*"]
  }
}

data "aws_subnet" "second" {
  availability_zone = data.aws_availability_zones.all.names[1]
  default_for_az    = true
}

resource "aws_instance" "web" {
  ami           = data.aws_ami.ubuntu.id
  instance_type = "s1.small"
  subnet_id     = data.aws_subnet.second.id
  user_data     = "#cloud-config\n"
  tags = {
    Name = "web"
    team = "red"
  }
}

output "instance" { value = aws_instance.web.id }
output "zone" { value = aws_instance.web.availability_zone }
