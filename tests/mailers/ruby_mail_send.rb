# Ruby's mail gem (what Rails' ActionMailer uses) with its default SMTP settings
# (enable_starttls_auto on): only address and port are given, and user_name and password when
# the mail has a login. ARGV[0]: the mail as JSON.
require "json"
require "mail"

m = JSON.parse(ARGV[0])
mail = Mail.new do
  from m["from"]
  to m["to"]
  subject m["subject"]
  text_part do
    content_type "text/plain; charset=UTF-8"
    body m["text"]
  end
  html_part do
    content_type "text/html; charset=UTF-8"
    body m["html"]
  end
  add_file filename: m["attachment_name"], content: File.binread(m["attachment_path"])
end
settings = { address: m["host"], port: m["port"] }
settings.update(user_name: m["user"], password: m["password"]) if m["user"]
mail.delivery_method :smtp, settings
mail.deliver!
puts "sent"
