// Jakarta Mail (Debian's libjakarta-mail-java) with its default SMTP settings (no STARTTLS):
// only mail.smtp.host and mail.smtp.port are set, and mail.smtp.auth with the user name and
// password when a login is given, as a Java app's config would.
// Arguments: host port from-address from-name to subject text-file html-file attachment-file
// attachment-name [user password].
import jakarta.mail.Message;
import jakarta.mail.Session;
import jakarta.mail.Transport;
import jakarta.mail.internet.InternetAddress;
import jakarta.mail.internet.MimeBodyPart;
import jakarta.mail.internet.MimeMessage;
import jakarta.mail.internet.MimeMultipart;
import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Properties;

public class JakartaSend {
    public static void main(String[] a) throws Exception {
        boolean login = a.length > 10;
        Properties properties = new Properties();
        properties.put("mail.smtp.host", a[0]);
        properties.put("mail.smtp.port", a[1]);
        if (login) {
            properties.put("mail.smtp.auth", "true");
        }
        MimeMessage message = new MimeMessage(Session.getInstance(properties));
        message.setFrom(new InternetAddress(a[2], a[3], "UTF-8"));
        message.setRecipients(Message.RecipientType.TO, InternetAddress.parse(a[4]));
        message.setSubject(a[5], "UTF-8");

        MimeBodyPart text = new MimeBodyPart();
        text.setText(read(a[6]), "UTF-8");
        MimeBodyPart html = new MimeBodyPart();
        html.setContent(read(a[7]), "text/html; charset=UTF-8");
        MimeMultipart alternative = new MimeMultipart("alternative");
        alternative.addBodyPart(text);
        alternative.addBodyPart(html);
        MimeBodyPart body = new MimeBodyPart();
        body.setContent(alternative);

        MimeBodyPart attachment = new MimeBodyPart();
        attachment.attachFile(new File(a[8]), "application/pdf", "base64");
        attachment.setFileName(a[9]);
        MimeMultipart mixed = new MimeMultipart("mixed");
        mixed.addBodyPart(body);
        mixed.addBodyPart(attachment);
        message.setContent(mixed);

        if (login) {
            Transport.send(message, a[10], a[11]);
        } else {
            Transport.send(message);
        }
        System.out.println("sent");
    }

    private static String read(String path) throws Exception {
        return Files.readString(Path.of(path), StandardCharsets.UTF_8);
    }
}
