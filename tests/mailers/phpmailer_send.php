<?php
// PHPMailer with its default settings (SMTPAutoTLS on, SMTPSecure empty): only the host and
// port are set, and SMTPAuth with the user name and password when the mail has a login, as a
// staging app's config would. argv[1]: the mail as JSON.
require '/usr/share/php/libphp-phpmailer/autoload.php';

use PHPMailer\PHPMailer\PHPMailer;

$m = json_decode($argv[1], true);
$mail = new PHPMailer(true);
$mail->isSMTP();
$mail->Host = $m['host'];
$mail->Port = $m['port'];
if ($m['user'] !== null) {
    $mail->SMTPAuth = true;
    $mail->Username = $m['user'];
    $mail->Password = $m['password'];
}
$mail->CharSet = PHPMailer::CHARSET_UTF8;
$mail->setFrom($m['from_address'], $m['from_name']);
$mail->addAddress($m['to']);
$mail->Subject = $m['subject'];
$mail->isHTML(true);
$mail->Body = $m['html'];
$mail->AltBody = $m['text'];
$mail->addAttachment($m['attachment_path'], $m['attachment_name']);
$mail->send();
echo "sent\n";
